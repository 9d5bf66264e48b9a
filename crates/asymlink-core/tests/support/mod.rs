//! Helpers shared by the core's integration tests.

pub mod corpus;
