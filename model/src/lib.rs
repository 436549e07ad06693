//! The protocol of `redlease`, model-checked.
//!
//! The model is the crate's, not a second story: the server of the model runs the crate's
//! own Lua scripts (read from its sources, [`scripts`]) in Lua 5.1 on a modelled keyspace
//! ([`keyspace`], [`lua`]); a differential test holds that keyspace to a real `redis-server`
//! (`tests/differential.rs`). Around the server, clients make the crate's decisions
//! ([`clients`]) and a network delivers their messages in any order, loses and duplicates
//! them ([`world`]); the server's clock moves on and keys expire. `stateright` searches every
//! interleaving of these steps ([`model`]) for a state that breaks a property
//! ([`properties`]). What the search found in the crate is run again on the real server, as
//! the shortest sequence of scripts that shows it (`tests/regressions.rs`).
//!
//! The map, from the bottom: `keyspace` (the data and commands) <- `lua` (scripts on it) <-
//! `scripts` (the crate's sources) ; `world` (a state, a step) <- `clients` (what a client
//! does) <- `model` (the search's view: steps, the server's runs) -> `properties`.

pub mod clients;
pub mod keyspace;
pub mod lua;
pub mod model;
pub mod properties;
pub mod scripts;
pub mod world;

pub use clients::Scenario;
pub use model::ProtocolModel;
pub use world::{Config, Faults, Old};
