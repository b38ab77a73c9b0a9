//! The dashboard (`docs/dashboard.md`): pages at `/dashboard` for the people behind a merchant,
//! served by the API itself. People sign in with an email and a password (never an API key);
//! their role decides what the server lets them do, whatever a page shows; every change is in
//! the audit log. The pages call the same functions as the API and the CLI.
//!
//! - `people`: roles and permissions, invitations, passwords, the team
//! - `sessions`: sign-in with its throttle, sessions in PostgreSQL, CSRF tokens
//! - `web`: the session extractor, forms checked for their CSRF token, headers, error pages
//! - `pages`: the HTML (escaped by construction) and `text`: its words in both languages
//! - `export`: payments and ledger postings as CSV
//! - `forms`: one-time ids for forms that must act once (a refund)
//! - `routes`: the handlers, a file per section; a change made from a page commits only with
//!   its audit line (`web::Change`)

pub mod export;
pub mod forms;
pub mod pages;
pub mod people;
pub mod routes;
pub mod sessions;
pub mod text;
pub mod web;

pub use routes::router;
