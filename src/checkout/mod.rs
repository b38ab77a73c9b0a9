//! Checkout (`docs/checkout.md`): a page per intent that its payer opens from the intent's
//! `checkout_url`, connects a wallet on, signs once and watches settle. The page holds the
//! intent's client secret (from the URL's fragment) and nothing of the merchant's: the secret opens
//! this intent's public view, its authorization and its confirm, nothing else. Paying goes through
//! the same rules as the merchant's confirm (`ways_to_pay::authorization::payments`).
//!
//! - `access`: the client secret, checked in constant time, as a request's key to one intent
//! - `view`: what the page may see of an intent (no metadata, no secret)
//! - `changes`: one `LISTEN` per replica that tells open pages their intent changed
//! - `page`: the HTML, its script and style, in English and Traditional Chinese
//! - `routes`: the page and its API under `/checkout` and `/v1/checkout`

pub mod access;
pub mod changes;
pub mod page;
pub mod routes;
pub mod view;

pub use routes::router;
