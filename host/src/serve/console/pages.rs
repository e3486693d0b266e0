//! The page every console view sits in (title, navigation, who is logged in), the login form,
//! and the console's script and styles. maud escapes every interpolated value; the pages work
//! without JavaScript, which only keeps the Pending page live and adds its keys.

use std::time::Duration;

use maud::{DOCTYPE, Markup, html};

use super::Viewer;

/// The console's views, as the navigation shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Questions waiting for a person.
    Pending,
    /// Session records.
    Sessions,
    /// Standing rules (admin).
    Rules,
    /// Plugins (admin).
    Plugins,
    /// Pinned MCP tool definitions (admin).
    Pins,
}

/// A console page: `body` under the navigation a logged-in `viewer` gets.
pub fn page(title: &str, viewer: Option<&Viewer>, tab: Tab, body: Markup) -> Markup {
    let mut tabs = vec![
        (Tab::Pending, "/", "Pending"),
        (Tab::Sessions, "/sessions", "Sessions"),
    ];
    if viewer.is_some_and(Viewer::is_admin) {
        tabs.push((Tab::Rules, "/rules", "Rules"));
        tabs.push((Tab::Plugins, "/plugins", "Plugins"));
        tabs.push((Tab::Pins, "/pins", "Pins"));
    }
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, true))
            body {
                @if let Some(viewer) = viewer {
                    header {
                        nav {
                            @for (t, href, label) in &tabs {
                                a.current[*t == tab] href=(href) aria-current=[(*t == tab).then_some("page")] { (label) }
                            }
                        }
                        div.who {
                            span { "Signed in as " b { (viewer.name()) } }
                            form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page's head: the title, the styles, and (on pages behind the login) the script.
fn head(title: &str, script: bool) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · approval-host" }
            link rel="stylesheet" href="/console.css";
            @if script { script src="/console.js" defer {} }
        }
    }
}

/// The login form, with an error when the last attempt failed.
pub fn login(error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("Log in", false))
            body {
                main {
                    h1 { "approval-host" }
                    @if let Some(e) = error { p.error role="alert" { (e) } }
                    form method="post" action="/login" {
                        label for="token" { "Token" }
                        input #token type="password" name="token" autocomplete="off" required;
                        button type="submit" { "Log in" }
                    }
                }
            }
        }
    }
}

/// How long something has waited, as a person reads it: `42 s`, `3 min 5 s`, `2 h 1 min`.
pub fn waited(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// The page script: live updates and keys on the Pending page.
pub const SCRIPT: &str = include_str!("assets/console.js");

/// Readable on a phone; no inline styles (the policy forbids them).
pub const STYLE: &str = include_str!("assets/console.css");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_read_as_a_person_would_say_them() {
        assert_eq!(waited(Duration::from_secs(42)), "42 s");
        assert_eq!(waited(Duration::from_secs(185)), "3 min 5 s");
        assert_eq!(waited(Duration::from_secs(7260)), "2 h 1 min");
    }
}
