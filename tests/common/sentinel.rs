//! The throwaway Sentinel set-ups of the fixtures crate, under the names the tests use.

pub use redlease_testing::sentinel::{Sentinel, SentinelDeployment as Deployment, MASTER_NAME};
