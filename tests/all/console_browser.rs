//! The web console in a real browser: Debian's chromium, driven through chromedriver
//! (WebDriver) against the real server.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use approval_host::Outcome;
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(30);

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_question_appears_live_shows_as_text_and_a_click_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = crate::console::server(dir.path(), 60).await;
    let driver = driver().await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}),
    );
    let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .unwrap();

    browser.goto(&format!("http://{addr}/login")).await.unwrap();
    browser
        .find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(crate::console::ANSWERER)
        .await
        .unwrap();
    browser
        .find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("p.empty"))
        .await
        .unwrap();

    // An agent asks: the open page shows the question without a manual reload.
    let (_service, _agent, asking) = crate::console::ask_script_call(&server, None).await;
    let arguments = browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("pre.arguments"))
        .await
        .unwrap();
    // The script is text on the page, never run.
    assert!(
        arguments
            .text()
            .await
            .unwrap()
            .contains("\"command\": \"<script>alert(1)</script>\""),
    );
    assert!(browser.get_alert_text().await.is_err(), "an alert opened");

    browser
        .find(Locator::Css("button.allow"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let verdict = tokio::time::timeout(PATIENCE, asking)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(verdict.outcome, Outcome::AllowedOnce);
    assert_eq!(verdict.answerer.as_deref(), Some("web:console"));
    browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("p.empty"))
        .await
        .unwrap();
    browser.close().await.unwrap();
}
