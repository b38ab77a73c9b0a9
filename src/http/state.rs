//! What the routes of one replica share, as one `AppState`: each route asks for the part it needs
//! (`State<Chains>`, `State<Pool>`) through `FromRef`, as axum's examples do, so a capability's
//! router names only its parts, never this type. What belongs to one request (the merchant, the
//! checkout access, the deadline) travels in the request's extensions instead.

use std::{ops::Deref, sync::Arc};

use axum::extract::FromRef;

use crate::{
    auth::Bootstrap,
    checkout::{changes::Changes, routes::ConfirmLimiter},
    db::{Background, Pool},
    intents::routes::{PublicBaseUrl, SettledChains},
    merchants::TermsCache,
    rails::Chains,
    tenants::Turns,
    webhooks::WebhookState,
    workers::Heartbeats,
};

/// The parts behind one `Arc`: axum clones the state for every request, so a clone is one
/// reference count, not one per part.
#[derive(Clone)]
pub struct AppState(Arc<Parts>);

impl AppState {
    pub fn new(parts: Parts) -> Self {
        Self(Arc::new(parts))
    }
}

impl Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

pub struct Parts {
    /// The requests' pool.
    pub pool: Pool,
    /// The background work's pool, which `/readyz` and `/metrics` use: they never wait behind
    /// requests.
    pub background: Background,
    /// One `Chains` for the routes and the workers: who waits in a request is woken by them.
    pub chains: Chains,
    pub bootstrap: Bootstrap,
    pub heartbeats: Heartbeats,
    pub changes: Changes,
    pub checkout_confirms: ConfirmLimiter,
    pub turns: Turns,
    pub settled_chains: SettledChains,
    pub public_base_url: PublicBaseUrl,
    pub webhooks: WebhookState,
    pub order_terms: TermsCache,
}

/// `FromRef` for each part: a clone of it (each is an `Arc` or a few of them).
macro_rules! parts {
    ($($field:ident: $part:ty),* $(,)?) => {
        $(impl FromRef<AppState> for $part {
            fn from_ref(state: &AppState) -> Self {
                state.$field.clone()
            }
        })*
    };
}

parts! {
    pool: Pool,
    background: Background,
    chains: Chains,
    bootstrap: Bootstrap,
    heartbeats: Heartbeats,
    changes: Changes,
    checkout_confirms: ConfirmLimiter,
    turns: Turns,
    settled_chains: SettledChains,
    public_base_url: PublicBaseUrl,
    webhooks: WebhookState,
    order_terms: TermsCache,
}
