//! Text the agent wrote, shown so that what a person reads is what they approve: characters a
//! browser would draw as nothing, or use to reorder what is drawn (controls, bidirectional
//! overrides and isolates, zero-width and other format characters, spaces that are not the
//! ASCII space), are each shown as a marked `⟨U+XXXX⟩`, never rendered as themselves.

use maud::{Markup, html};

/// The class of the mark that stands for a hidden character (styled to stand out).
pub const MARK_CLASS: &str = "hidden-char";

/// Whether `c` is drawn as nothing, or changes how the text around it is drawn.
pub fn is_hidden(c: char) -> bool {
    match c {
        '\n' | '\t' | ' ' => false,
        c if c.is_control() => true,
        // Other spaces: they read as an ASCII space and are not one.
        c if c.is_whitespace() => true,
        // Soft hyphen, Arabic letter mark, Mongolian vowel separator.
        '\u{00AD}' | '\u{061C}' | '\u{180E}' => true,
        // Zero-width space, non-joiner, joiner; left-to-right and right-to-left marks.
        '\u{200B}'..='\u{200F}' => true,
        // Bidirectional embeddings and overrides; word joiner, invisible operators; isolates;
        // deprecated format characters.
        '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}' => true,
        // Variation selectors, byte order mark, interlinear annotations.
        '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}' => true,
        // Tag characters and supplementary variation selectors.
        '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}' => true,
        _ => false,
    }
}

/// `text`, escaped, with each hidden character shown as its code point.
pub fn visible(text: &str) -> Markup {
    if !text.chars().any(is_hidden) {
        return html! { (text) };
    }
    let mut parts: Vec<(bool, String)> = Vec::new();
    for c in text.chars() {
        let hidden = is_hidden(c);
        match parts.last_mut() {
            Some((h, s)) if *h == hidden && !hidden => s.push(c),
            _ => parts.push((hidden, c.to_string())),
        }
    }
    html! {
        @for (hidden, s) in &parts {
            @if *hidden {
                @let code = format!("U+{:04X}", s.chars().next().map_or(0, u32::from));
                span class=(MARK_CLASS) title=(code) { "⟨" (code) "⟩" }
            } @else {
                (s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_shown_by_code_point_and_the_rest_escaped() {
        assert_eq!(visible("ls -la <src>").into_string(), "ls -la &lt;src&gt;");
        let shown = visible("rm -rf /\u{202E}txt.exe\u{200B}x\u{00A0}y").into_string();
        assert_eq!(
            shown,
            "rm -rf /<span class=\"hidden-char\" title=\"U+202E\">⟨U+202E⟩</span>txt.exe\
             <span class=\"hidden-char\" title=\"U+200B\">⟨U+200B⟩</span>x\
             <span class=\"hidden-char\" title=\"U+00A0\">⟨U+00A0⟩</span>y"
        );
        for c in [
            '\u{1B}',
            '\u{2066}',
            '\u{2069}',
            '\u{FEFF}',
            '\u{E0041}',
            '\u{3000}',
        ] {
            assert!(is_hidden(c), "{:X}", u32::from(c));
        }
        for c in ['a', 'é', '中', '\n', '\t', ' ', '😀'] {
            assert!(!is_hidden(c), "{:X}", u32::from(c));
        }
    }
}
