//! An intent paid by an EIP-3009 authorization its payer signs (`docs/settlement.md`): the
//! document, the confirm that checks the signature and queues the submission, and the watch that
//! settles the intent once the chain used its nonce.
//!
//! - `payments`: the rules of paying an intent (what may be paid, the document, the confirm) and
//!   the submission kind that says when its payment is no longer wanted
//! - `routes`: `GET …/authorization`, `POST …/confirm`, over `payments`
//! - `watch`: what the follower looks for (nonce uses), settlement and expiry by chain time

pub mod payments;
pub mod routes;
pub mod watch;
