//! The page and its assets, embedded in the binary (no build step): the
//! dashboard's HTML, CSS and script, and the vendored uPlot chart library
//! (MIT; `nodes/assets/uplot/SOURCE` says where it came from).

const INDEX: &str = include_str!("../../assets/dashboard/index.html");
const APP_JS: &str = include_str!("../../assets/dashboard/app.js");
const STYLE: &str = include_str!("../../assets/dashboard/style.css");
const UPLOT_JS: &str = include_str!("../../assets/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../assets/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("../../assets/uplot/LICENSE");

/// Content type and body of the asset at `path`, if there is one.
pub fn get(path: &str) -> Option<(&'static str, &'static str)> {
    Some(match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/assets/app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "/assets/style.css" => ("text/css; charset=utf-8", STYLE),
        "/assets/uPlot.iife.min.js" => ("text/javascript; charset=utf-8", UPLOT_JS),
        "/assets/uPlot.min.css" => ("text/css; charset=utf-8", UPLOT_CSS),
        "/assets/uPlot-LICENSE" => ("text/plain; charset=utf-8", UPLOT_LICENSE),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_references_only_served_assets() {
        let (ct, page) = get("/").expect("index");
        assert!(ct.starts_with("text/html"));
        for src in page
            .split(['"', '\''])
            .filter(|s| s.starts_with("/assets/"))
        {
            assert!(
                get(src).is_some(),
                "the page loads {src}, which is not served"
            );
        }
        assert!(get("/assets/../Cargo.toml").is_none());
        assert!(UPLOT_LICENSE.contains("MIT"));
    }

    #[test]
    fn the_page_never_carries_a_token() {
        let (_, page) = get("/").expect("index");
        let (_, js) = get("/assets/app.js").expect("js");
        // The token is typed by the user, kept in memory only and sent
        // inside each request, never in a URL (which proxies and logs keep).
        assert!(!js.contains("localStorage") && !js.contains("sessionStorage"));
        assert!(!js.contains("token=") && !page.contains("token="));
        assert!(!page.contains(" value="), "the page fills in an input");
    }
}
