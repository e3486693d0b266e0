//! The web console in a real browser: Debian's chromium, driven through chromedriver
//! (WebDriver) against the real server. With `APPROVAL_HOST_SCREENSHOTS=DIR` the page tour also
//! saves a screenshot of each of the four pages there (what `docs/console-*.png` are).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use approval_host::Outcome;
use approval_host::serve::console::pending::{ENDED_CANCELLED, ENDED_TIMED_OUT};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(30);

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver and the chromium it started share a process group: a test that failed
        // before closing its browser leaves no chromium behind.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signals a process group this test started; no memory is touched.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}

async fn driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian: apt-get install chromium chromium-driver; .ci/run does)");
    let started = std::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(started.elapsed() < PATIENCE, "chromedriver did not start");
        tokio::task::yield_now().await;
    }
    Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

/// A headless chromium, with the driver that runs it (dropped after the client).
async fn browser() -> (Client, Driver) {
    let driver = driver().await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,900"]}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .unwrap();
    (client, driver)
}

/// Logs in on the form with `token`, then waits for the Pending page.
async fn log_in(browser: &Client, addr: std::net::SocketAddr, token: &str) {
    browser.goto(&format!("http://{addr}/login")).await.unwrap();
    browser
        .find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    click(browser, Locator::Css("button[type=submit]")).await;
    live(browser).await;
}

/// Waits until the Pending page is live: its stream is open and it has missed nothing.
async fn live(browser: &Client) {
    wait_for(browser, "section#pending[data-ready]").await;
}

/// Marks the page showing now, so that `live_anew` can tell it from the page a form's submission
/// (or a reload) brings next: a service settles a question before the browser has loaded the page
/// the answer redirects to, and an element found on the old page goes stale under the test.
async fn mark_page(browser: &Client) {
    browser
        .execute("document.documentElement.dataset.old = 'yes'", vec![])
        .await
        .unwrap();
}

/// Waits until a page other than the one `mark_page` marked is showing and following the stream.
async fn live_anew(browser: &Client) {
    wait_for(browser, "html:not([data-old]) section#pending[data-ready]").await;
}

/// Waits for `css` on a page other than the one `mark_page` marked.
async fn wait_anew(browser: &Client, css: &str) -> Element {
    wait_for(browser, &format!("html:not([data-old]) {css}")).await
}

async fn wait_for(browser: &Client, css: &str) -> Element {
    browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} never showed: {e}"))
}

/// Waits until nothing matches `css` (without reloading the page).
async fn wait_gone(browser: &Client, css: &str) {
    let started = std::time::Instant::now();
    while !browser
        .find_all(Locator::Css(css))
        .await
        .unwrap()
        .is_empty()
    {
        assert!(started.elapsed() < PATIENCE, "{css} never left the page");
        tokio::task::yield_now().await;
    }
}

/// Clicks the element `locator` finds.
async fn click(browser: &Client, locator: Locator<'_>) {
    browser
        .find(locator)
        .await
        .unwrap_or_else(|e| panic!("{locator:?}: {e}"))
        .click()
        .await
        .unwrap();
}

/// Types `text` into the field `css` finds inside `form`.
async fn type_into(form: &Element, css: &str, text: &str) {
    form.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .send_keys(text)
        .await
        .unwrap();
}

/// Presses `key` on the page (not in a field).
async fn press(browser: &Client, key: char) {
    browser
        .perform_actions(
            KeyActions::new("keyboard".to_owned())
                .then(KeyAction::Down { value: key })
                .then(KeyAction::Up { value: key }),
        )
        .await
        .unwrap();
}

async fn verdict_of(
    asking: tokio::task::JoinHandle<approval_host::Verdict>,
) -> approval_host::Verdict {
    tokio::time::timeout(PATIENCE, asking)
        .await
        .expect("the question was not settled")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_question_appears_live_shows_as_text_and_a_click_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    log_in(&browser, addr, crate::console::ANSWERER).await;
    wait_for(&browser, "p.empty").await;

    // An agent asks: the open page shows the question without a manual reload.
    let (_service, _agent, asking) = crate::console::ask_script_call(&server, None).await;
    let arguments = wait_for(&browser, "pre.arguments").await;
    // The script is text on the page, never run.
    assert!(
        arguments
            .text()
            .await
            .unwrap()
            .contains("\"command\": \"<script>alert(1)</script>\""),
    );
    assert!(browser.get_alert_text().await.is_err(), "an alert opened");

    click(&browser, Locator::Css("button.allow")).await;
    let verdict = verdict_of(asking).await;
    assert_eq!(verdict.outcome, Outcome::AllowedOnce);
    assert_eq!(verdict.answerer.as_deref(), Some("web:console"));
    // The audit names who clicked.
    let log = std::fs::read_to_string(
        approval_host::DirStore::new(dir.path().join("state")).session_path("s1"),
    )
    .unwrap();
    let decided = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["type"] == "approval/decided")
        .expect("a decided event");
    assert_eq!(decided["data"]["outcome"], "allowed-once");
    assert_eq!(decided["data"]["answerer"], "web:console");
    wait_for(&browser, "p.empty").await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_keys_reject_with_a_reason_always_allow_saves_the_edited_rule_and_a_cancelled_question_leaves()
 {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    log_in(&browser, addr, crate::console::ANSWERER).await;
    let service = server.service().clone();
    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();

    // `r`, a reason, Enter: rejected, and the model gets the reason.
    let asking = crate::console::ask_call(
        &service,
        &agent,
        "c1",
        json!({"command": "make deploy"}),
        None,
    )
    .await;
    wait_for(&browser, "article.question.selected").await;
    live(&browser).await;
    mark_page(&browser).await;
    press(&browser, 'r').await;
    browser
        .active_element()
        .await
        .unwrap()
        .send_keys(&format!("not before the review{}", char::from(Key::Enter)))
        .await
        .unwrap();
    let verdict = verdict_of(asking).await;
    assert_eq!(verdict.outcome, Outcome::Rejected);
    assert_eq!(verdict.reason.as_deref(), Some("not before the review"));
    assert_eq!(verdict.answerer.as_deref(), Some("web:console"));
    live_anew(&browser).await;

    // Two questions: `j` selects the second, `a` allows it; the first keeps waiting.
    let first = crate::console::ask_call(
        &service,
        &agent,
        "c2",
        json!({"command": "ls -la src"}),
        None,
    )
    .await;
    wait_for(&browser, "article.question").await;
    let second =
        crate::console::ask_call(&service, &agent, "c3", json!({"command": "pwd"}), None).await;
    let started = std::time::Instant::now();
    while browser
        .find_all(Locator::Css("article.question"))
        .await
        .unwrap()
        .len()
        < 2
    {
        assert!(
            started.elapsed() < PATIENCE,
            "the second question never showed"
        );
        tokio::task::yield_now().await;
    }
    live(&browser).await;
    mark_page(&browser).await;
    press(&browser, 'j').await;
    press(&browser, 'a').await;
    let verdict = verdict_of(second).await;
    assert_eq!(verdict.outcome, Outcome::AllowedOnce);
    assert!(!first.is_finished());
    live_anew(&browser).await;

    // Always allow, with the offered rule narrowed first.
    let always = wait_for(&browser, "article.question details.always").await;
    always
        .find(Locator::Css("summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let rule = always
        .find(Locator::Css("form.always input[name=rule]"))
        .await
        .unwrap();
    assert_eq!(
        rule.prop("value").await.unwrap().as_deref(),
        Some("bash(ls:*)")
    );
    rule.clear().await.unwrap();
    rule.send_keys("bash(ls -la:*)").await.unwrap();
    mark_page(&browser).await;
    always
        .find(Locator::Css("button.allow"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let verdict = verdict_of(first).await;
    assert_eq!(verdict.outcome, Outcome::AllowedOnce);
    let rules = service.rules().unwrap().list(None);
    assert_eq!(
        rules.iter().map(|r| r.rule.as_str()).collect::<Vec<_>>(),
        ["bash(ls -la:*)"]
    );
    live_anew(&browser).await;

    // A question cancelled by its asker leaves the open page at once, saying so.
    let cancel = CancellationToken::new();
    let asking = tokio::spawn({
        let (service, agent, cancel) = (service.clone(), agent.clone(), cancel.clone());
        async move {
            service
                .ask(approval_host::ApprovalRequest::new(&agent, "web_fetch").cancel(cancel))
                .await
                .unwrap()
        }
    });
    wait_for(&browser, "article.question").await;
    live(&browser).await;
    cancel.cancel();
    assert_eq!(verdict_of(asking).await.outcome, Outcome::Cancelled);
    wait_gone(&browser, "article.question").await;
    let settled = wait_for(&browser, "#recent li").await.text().await.unwrap();
    assert!(
        settled.starts_with("web_fetch (s1): ") && settled.ends_with(ENDED_CANCELLED),
        "{settled}"
    );
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_nothing_shows_without_a_login_and_a_question_nobody_answers_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 1).await;
    let (browser, _driver) = browser().await;
    for page in ["/", "/sessions", "/rules", "/plugins", "/sessions/s1"] {
        browser.goto(&format!("http://{addr}{page}")).await.unwrap();
        wait_for(&browser, "#token").await;
        assert_eq!(
            browser.current_url().await.unwrap().path(),
            "/login",
            "{page}"
        );
    }
    log_in(&browser, addr, crate::console::ANSWERER).await;
    let service = server.service().clone();
    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let asking =
        crate::console::ask_call(&service, &agent, "c1", json!({"command": "make"}), None).await;
    let verdict = verdict_of(asking).await;
    assert_eq!(verdict.outcome, Outcome::Unavailable);
    assert_eq!(verdict.to_json()["failure"]["kind"], "timeout");
    // Whether the page saw it arrive or not, it ends with the question settled and said so.
    let started = std::time::Instant::now();
    loop {
        let settled = browser.find_all(Locator::Css("#recent li")).await.unwrap();
        if let Some(li) = settled.first()
            && li.text().await.unwrap().ends_with(ENDED_TIMED_OUT)
        {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "the timeout never showed");
        tokio::task::yield_now().await;
    }
    assert!(
        browser
            .find_all(Locator::Css("article.question"))
            .await
            .unwrap()
            .is_empty()
    );
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_admin_tours_the_four_pages_adds_a_rule_and_reloads() {
    let shots = std::env::var_os("APPROVAL_HOST_SCREENSHOTS").map(std::path::PathBuf::from);
    let shoot = async |browser: &Client, name: &str| {
        if let Some(dir) = &shots {
            std::fs::create_dir_all(dir).unwrap();
            let png = browser.screenshot().await.unwrap();
            std::fs::write(dir.join(format!("console-{name}.png")), png).unwrap();
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    log_in(&browser, addr, crate::console::ADMIN).await;
    let service = server.service().clone();
    let agent = service.agent("feature-login", "claude").await.unwrap();
    service.start_turn("feature-login").await.unwrap();
    let done = crate::console::ask_call(
        &service,
        &agent,
        "c1",
        json!({"command": "rm -rf build"}),
        None,
    )
    .await;
    assert_eq!(verdict_of(done).await.outcome, Outcome::Rejected);
    let asking = crate::console::ask_call(
        &service,
        &agent,
        "c2",
        json!({"command": "npm run test -- --watch=false", "description": "Run the unit tests"}),
        Some("the tests must pass before the commit"),
    )
    .await;
    wait_for(&browser, "article.question details.always summary")
        .await
        .click()
        .await
        .unwrap();
    shoot(&browser, "pending").await;

    // Rules: add one through the form; it shows with its creator.
    click(&browser, Locator::LinkText("Rules")).await;
    let form = wait_for(&browser, "form.add-rule").await;
    type_into(&form, "input[name=rule]", "bash(git status)").await;
    type_into(&form, "input[name=for]", "8h").await;
    type_into(&form, "input[name=reason]", "read-only").await;
    mark_page(&browser).await;
    form.find(Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The form posts and the page comes back listing the rule.
    let row = wait_anew(&browser, "table.rules tbody tr").await;
    let rules = service.rules().unwrap().list(None);
    assert_eq!(rules.len(), 1);
    assert_eq!(
        row.attr("id").await.unwrap(),
        Some(format!("r-{}", rules[0].id))
    );
    assert!(row.text().await.unwrap().contains("web:root"));
    shoot(&browser, "rules").await;

    // Plugins: a reload reports what it did.
    click(&browser, Locator::LinkText("Plugins")).await;
    wait_for(&browser, "tr#p-deny-commands").await;
    mark_page(&browser).await;
    click(
        &browser,
        Locator::Css("form[action='/plugins/reload'] button"),
    )
    .await;
    let report = wait_anew(&browser, "p.reloaded")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        report.starts_with("Reloaded. Added: none; swapped: none; removed: none."),
        "{report}"
    );
    shoot(&browser, "plugins").await;
    // The report came by a redirect: the page is a GET, and refreshing it reloads nothing.
    assert_eq!(browser.current_url().await.unwrap().path(), "/plugins");
    let reloads = |page: String| {
        page.split("<tr id=\"p-deny-commands\">")
            .nth(1)
            .and_then(|row| row.split("<td class=\"num\">").nth(4))
            .and_then(|n| n.split('<').next().map(str::to_owned))
    };
    let before = reloads(browser.source().await.unwrap());
    assert!(before.is_some(), "the plugin's reload count");
    mark_page(&browser).await;
    browser.refresh().await.unwrap();
    wait_anew(&browser, "tr#p-deny-commands").await;
    assert!(
        browser
            .find_all(Locator::Css("p.reloaded"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(reloads(browser.source().await.unwrap()), before);

    // Sessions: the list, then the session's timeline.
    click(&browser, Locator::LinkText("Sessions")).await;
    wait_for(&browser, "tr#s-feature-login").await;
    click(&browser, Locator::LinkText("feature-login")).await;
    let rejected = wait_for(&browser, "li.question b.outcome-rejected").await;
    assert_eq!(rejected.text().await.unwrap(), "rejected");
    // The question still waiting is the session's live state, not a fault of its log.
    assert!(
        browser
            .find_all(Locator::Css("main p.error"))
            .await
            .unwrap()
            .is_empty()
    );
    shoot(&browser, "sessions").await;

    // On a phone's screen every page fits its width (no sideways scrolling).
    browser.set_window_size(390, 844).await.unwrap();
    for page in [
        "/",
        "/sessions",
        "/sessions/feature-login",
        "/rules",
        "/plugins",
    ] {
        browser.goto(&format!("http://{addr}{page}")).await.unwrap();
        wait_for(&browser, "main").await;
        let overflow = browser
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(overflow, json!(0), "{page} is wider than a phone");
    }

    browser.goto(&format!("http://{addr}/")).await.unwrap();
    wait_for(&browser, "button.allow")
        .await
        .click()
        .await
        .unwrap();
    assert_eq!(verdict_of(asking).await.outcome, Outcome::AllowedOnce);
    browser.close().await.unwrap();
}

/// The id of the question asked last, once the console holds `count` of them.
async fn newest_question(server: &approval_host::serve::Server, count: usize) -> String {
    let pending = server.web_pending().unwrap().clone();
    let started = std::time::Instant::now();
    loop {
        let list = pending.list();
        if list.len() == count {
            return list.last().unwrap().id.clone();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{count} questions never waited"
        );
        tokio::task::yield_now().await;
    }
}

/// Waits until exactly `count` questions show on the page in view.
async fn questions_shown(browser: &Client, count: usize) {
    let started = std::time::Instant::now();
    while browser
        .find_all(Locator::Css("html:not([data-old]) article.question"))
        .await
        .unwrap()
        .len()
        != count
    {
        assert!(
            started.elapsed() < PATIENCE,
            "{count} questions never showed"
        );
        tokio::task::yield_now().await;
    }
}

/// The ids of the questions marked selected on the page.
async fn selected(browser: &Client) -> Vec<String> {
    let mut ids = Vec::new();
    for q in browser
        .find_all(Locator::Css("article.question.selected"))
        .await
        .unwrap()
    {
        ids.push(q.attr("id").await.unwrap().unwrap_or_default());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_selection_stays_on_its_question_through_live_updates_and_keys_act_on_the_focused_one()
 {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    log_in(&browser, addr, crate::console::ANSWERER).await;
    let service = server.service().clone();
    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();

    // First a question its asker will withdraw, then two more; `j` selects the second.
    let cancel = CancellationToken::new();
    let withdrawn = tokio::spawn({
        let (service, agent, cancel) = (service.clone(), agent.clone(), cancel.clone());
        async move {
            service
                .ask(approval_host::ApprovalRequest::new(&agent, "web_fetch").cancel(cancel))
                .await
                .unwrap()
        }
    });
    let first = newest_question(&server, 1).await;
    let second_asked =
        crate::console::ask_call(&service, &agent, "c2", json!({"command": "pwd"}), None).await;
    let second = newest_question(&server, 2).await;
    questions_shown(&browser, 2).await;
    live(&browser).await;
    press(&browser, 'j').await;
    assert_eq!(selected(&browser).await, [format!("q-{second}")]);

    // A question arrives (the page reloads): the selection stays on the second.
    mark_page(&browser).await;
    let third_asked =
        crate::console::ask_call(&service, &agent, "c3", json!({"command": "whoami"}), None).await;
    let third = newest_question(&server, 3).await;
    questions_shown(&browser, 3).await;
    live_anew(&browser).await;
    assert_eq!(selected(&browser).await, [format!("q-{second}")]);

    // The first leaves (its asker withdrew it): the selection does not slide onto the third.
    cancel.cancel();
    assert_eq!(verdict_of(withdrawn).await.outcome, Outcome::Cancelled);
    wait_gone(&browser, &format!("article#q-{first}")).await;
    assert_eq!(selected(&browser).await, [format!("q-{second}")]);
    mark_page(&browser).await;
    press(&browser, 'a').await;
    assert_eq!(verdict_of(second_asked).await.outcome, Outcome::AllowedOnce);
    assert!(!third_asked.is_finished());
    live_anew(&browser).await;

    // A key acts on the question that has the focus, whichever is selected.
    mark_page(&browser).await;
    let fourth_asked =
        crate::console::ask_call(&service, &agent, "c4", json!({"command": "date"}), None).await;
    let fourth = newest_question(&server, 2).await;
    questions_shown(&browser, 2).await;
    live_anew(&browser).await;
    assert_eq!(selected(&browser).await, [format!("q-{third}")]);
    browser
        .execute(
            &format!("document.querySelector('#q-{fourth} pre.arguments').focus()"),
            vec![],
        )
        .await
        .unwrap();
    press(&browser, 'a').await;
    assert_eq!(verdict_of(fourth_asked).await.outcome, Outcome::AllowedOnce);
    assert!(!third_asked.is_finished());
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_page_whose_login_ended_says_so_with_a_link_to_log_in_again() {
    use approval_host::serve::console::questions::LOGIN_LOST;
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    log_in(&browser, addr, crate::console::ANSWERER).await;
    // The person's token is revoked: the login ends, and with it the page's live updates.
    let config = dir.path().join("deploy.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &approval_host::serve::auth::token_hash(crate::console::ANSWERER),
        &approval_host::serve::auth::token_hash("aht_someone_else"),
    );
    std::fs::write(&config, text).unwrap();
    server.reload().await.unwrap();
    let banner = wait_for(&browser, "#lost:not([hidden])").await;
    let text = banner.text().await.unwrap();
    assert!(text.starts_with(LOGIN_LOST), "{text}");
    assert!(
        wait_for(&browser, "section#pending:not([data-ready])")
            .await
            .attr("data-live")
            .await
            .unwrap()
            .is_some()
    );
    banner
        .find(Locator::Css("a[href='/login']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&browser, "#token").await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_every_page_fits_its_width_at_1440_and_1100_px_and_on_a_phone() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    log_in(&browser, addr, crate::console::ADMIN).await;
    // Long things that do not break by themselves: a session id, a path, a rule.
    let session = "feature_a_rather_long_session_identifier_from_a_ci_pipeline_0123456789abcdef";
    let service = server.service().clone();
    let agent = service
        .agent(session, "agent_with_a_rather_long_name_that_does_not_break")
        .await
        .unwrap();
    service.start_turn(session).await.unwrap();
    let path = format!("/{}", "very-long-directory-name/".repeat(40));
    let _asked = crate::console::ask_call(
        &service,
        &agent,
        "c1",
        json!({"file_path": path, "command": "x".repeat(3000)}),
        Some(&"because ".repeat(60)),
    )
    .await;
    newest_question(&server, 1).await;
    service
        .add_rule(approval_host::rules::NewRule {
            rule: format!("Read(/{path}**)"),
            effect: approval_host::answer::Effect::Allow,
            scope: approval_host::answer::RuleScope::Project,
            session: None,
            lasts: None,
            creator: "a-person-with-a-long-name@example.org".to_owned(),
            reason: Some("reads ".repeat(40)),
        })
        .await
        .unwrap();
    for (width, height) in [(1440, 900), (1100, 900), (390, 844)] {
        browser.set_window_size(width, height).await.unwrap();
        for page in [
            "/".to_owned(),
            "/sessions".to_owned(),
            format!("/sessions/{session}"),
            "/rules".to_owned(),
            "/plugins".to_owned(),
        ] {
            browser.goto(&format!("http://{addr}{page}")).await.unwrap();
            wait_for(&browser, "main").await;
            // Nothing sticks out of the page's column, and the page out of the window (what
            // scrolls inside its own box, a `pre`, is within it).
            let sizes = browser
                .execute(
                    "const main = document.querySelector('main').getBoundingClientRect();
                     const out = [...document.querySelectorAll('main *')]
                       .filter(e => e.getBoundingClientRect().right > main.right + 1)
                       .map(e => e.tagName.toLowerCase() + '.' + e.className);
                     return [document.documentElement.scrollWidth,
                             document.documentElement.clientWidth, out.slice(0, 5)];",
                    vec![],
                )
                .await
                .unwrap();
            let (scroll, client) = (sizes[0].as_u64().unwrap(), sizes[1].as_u64().unwrap());
            assert!(
                scroll <= client,
                "{page} at {width} px is {scroll} px wide in a {client} px window"
            );
            assert_eq!(
                sizes[2],
                json!([]),
                "{page} at {width} px: these stick out of the column"
            );
        }
    }
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_what_a_person_reads_is_theirs_and_whole_and_a_limited_login_says_when() {
    use approval_host::serve::console::rate_limited;
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let (browser, _driver) = browser().await;
    let service = server.service().clone();
    // Another team's session asked about bash; the team's own, with hidden characters.
    let other = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let _theirs =
        crate::console::ask_call(&service, &other, "c1", json!({"command": "make"}), None).await;
    let team = service.agent("team-1", "b").await.unwrap();
    service.start_turn("team-1").await.unwrap();
    service
        .record_tool_call(
            &team,
            "c2",
            "web_fetch",
            json!({"url": "https://example.org/\u{202E}gpj.exe"}),
        )
        .await
        .unwrap();
    let _ours = tokio::spawn({
        let service = service.clone();
        let request = approval_host::ApprovalRequest::new(&team, "web_fetch")
            .call_id("c2")
            .reason("fetch the docs\u{200B}");
        async move { service.ask(request).await.unwrap() }
    });
    newest_question(&server, 2).await;

    log_in(&browser, addr, crate::console::TEAM).await;
    questions_shown(&browser, 1).await;
    let arguments = wait_for(&browser, "article.question pre.arguments").await;
    let shown = arguments.text().await.unwrap();
    assert!(shown.contains("example.org/⟨U+202E⟩gpj.exe"), "{shown}");
    let reason = wait_for(&browser, "article.question dd.reason")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(reason, "fetch the docs⟨U+200B⟩");
    // The Sessions page: only the team's session, and only its tools in the filter.
    browser
        .goto(&format!("http://{addr}/sessions"))
        .await
        .unwrap();
    wait_for(&browser, "tr#s-team-1").await;
    let source = browser.source().await.unwrap();
    assert!(
        !source.contains("s-s1") && !source.contains("bash"),
        "{source}"
    );
    assert!(source.contains("<option value=\"web_fetch\""), "{source}");

    // Logged out, then someone at this address guesses: the right token is told when to retry.
    click(&browser, Locator::Css("form[action='/logout'] button")).await;
    wait_for(&browser, "#token").await;
    browser.delete_all_cookies().await.unwrap();
    for _ in 0..approval_host::serve::auth::MAX_FAILURES {
        let reply = crate::console::http(
            addr,
            "POST",
            "/login",
            None,
            Some(&[("token", "aht_guess")]),
        )
        .await;
        assert_eq!(reply.status, 401);
    }
    browser.goto(&format!("http://{addr}/login")).await.unwrap();
    wait_for(&browser, "#token")
        .await
        .send_keys(crate::console::TEAM)
        .await
        .unwrap();
    click(&browser, Locator::Css("button[type=submit]")).await;
    let alert = wait_for(&browser, "p.error[role=alert]")
        .await
        .text()
        .await
        .unwrap();
    let seconds = crate::console::retry_seconds(&alert);
    assert_eq!(alert, rate_limited(Duration::from_secs(seconds)));
    browser.close().await.unwrap();
}
