//! `edgemu train …`: policy training in virtual time.

pub mod lyreo;
pub mod repair;
