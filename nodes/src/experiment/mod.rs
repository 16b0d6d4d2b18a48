//! `edgemu experiment …`: the papers' experiment grids, written as results
//! folders.

pub mod lyreo;
pub mod pfec_run;
pub mod priorityfec;
