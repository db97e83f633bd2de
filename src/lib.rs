pub mod algorithms;
pub mod encoding;
pub mod error;
pub mod parse;
