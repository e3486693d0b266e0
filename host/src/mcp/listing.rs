//! Reading one of a server's lists whole (its tools, prompts, resources or resource templates),
//! page after page, within bounds: a server that pages forever, or never answers, cannot hold a
//! connection or fill the gateway's memory.

use std::future::Future;

use rmcp::model::{
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams,
};
use rmcp::service::ServiceError;

/// Pages of one server's list the gateway reads.
pub(super) const MAX_PAGES: usize = 64;

/// How long the gateway waits for one server's whole list.
pub(super) const LIST_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// One page of a list: its items, and where the next starts.
pub(super) trait Page {
    type Item;
    fn into_page(self) -> (Vec<Self::Item>, Option<String>);
}

macro_rules! page {
    ($result:ty, $item:ty, $field:ident) => {
        impl Page for $result {
            type Item = $item;
            fn into_page(self) -> (Vec<$item>, Option<String>) {
                (self.$field, self.next_cursor)
            }
        }
    };
}

page!(ListToolsResult, rmcp::model::Tool, tools);
page!(ListPromptsResult, rmcp::model::Prompt, prompts);
page!(ListResourcesResult, rmcp::model::Resource, resources);
page!(
    ListResourceTemplatesResult,
    rmcp::model::ResourceTemplate,
    resource_templates
);

/// Every item of `server`'s list of `what` (`"tools"`), read with `page`; `gone` is the text of a
/// server that has gone.
pub(super) async fn whole<P, Fut>(
    server: &str,
    what: &str,
    gone: &str,
    mut page: impl FnMut(Option<PaginatedRequestParams>) -> Fut,
) -> Result<Vec<P::Item>, String>
where
    P: Page,
    Fut: Future<Output = Result<P, ServiceError>>,
{
    let listing = async {
        let mut items = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let (got, next) = page(Some(
                PaginatedRequestParams::default().with_cursor(cursor.take()),
            ))
            .await
            .map_err(|e| format!("{gone}: {e}"))?
            .into_page();
            items.extend(got);
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(items),
            }
        }
        Err(format!(
            "the MCP server \"{server}\" lists its {what} in more than {MAX_PAGES} pages: the gateway reads no more"
        ))
    };
    tokio::time::timeout(LIST_PATIENCE, listing)
        .await
        .map_err(|_| {
            format!(
                "the MCP server \"{server}\" did not list its {what} within {} s",
                LIST_PATIENCE.as_secs()
            )
        })?
}
