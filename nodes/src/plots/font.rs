//! The bundled font. plotters' `ab_glyph` backend has no system font lookup: every family a
//! chart names must be registered from bytes. We register DejaVu Sans (nodes/assets/fonts/,
//! license beside it) as `sans-serif` once per process, so PNG text renders on a machine
//! without fontconfig or any installed font, and SVG text is laid out with the same metrics.

use plotters::style::{register_font, FontStyle};
use std::sync::OnceLock;

/// DejaVu Sans, from Debian's fonts-dejavu-core.
static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// The family name every chart uses (plotters' `FontFamily::SansSerif`).
pub const FAMILY: &str = "sans-serif";

/// Registers the bundled font (idempotent; the result of the first call is kept).
pub fn ensure_registered() -> Result<(), super::PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        [
            FontStyle::Normal,
            FontStyle::Bold,
            FontStyle::Italic,
            FontStyle::Oblique,
        ]
        .into_iter()
        .all(|style| register_font(FAMILY, style, DEJAVU_SANS).is_ok())
    });
    if ok {
        Ok(())
    } else {
        Err(super::PlotError::Font)
    }
}
