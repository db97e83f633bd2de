pub mod algorithms;
pub mod encoding;
