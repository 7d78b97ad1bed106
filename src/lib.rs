//! redline: a load tester for AI-native services.

pub mod sim;
pub mod tokenize;
