//! The refund state machine: `created` (the merchant is to sign) → `processing` (signed, queued
//! for the chain) → `succeeded` (the transfer back is confirmed) or `failed` (its authorization
//! expired, was canceled, or its nonce was used otherwise). A signed authorization may also reach
//! the chain without our confirm: the chain is the source of truth.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum RefundState {
    /// Waiting for the merchant's signature of its authorization.
    Created,
    /// The merchant's signed authorization is queued for the chain.
    Processing,
    /// The transfer back to the payer is confirmed on chain.
    Succeeded,
    /// It can never move money; its amount can be refunded again.
    Failed,
}

impl RefundState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

impl fmt::Display for RefundState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The merchant's signature was accepted (`POST /v1/refunds/{id}/confirm`).
    Confirm,
    /// A confirmed transaction used the refund's nonce and moved exactly the refund.
    Settle,
    /// A confirmed transaction used the refund's nonce for another amount or recipient.
    BurnNonce,
    /// The merchant canceled the authorization on chain.
    CancelAuthorization,
    /// A confirmed block's time passed the authorization's `validBefore`.
    Expire,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirm => "confirm",
            Self::Settle => "settle",
            Self::BurnNonce => "burn_nonce",
            Self::CancelAuthorization => "cancel_authorization",
            Self::Expire => "expire",
        }
    }
}

/// Where `action` takes a refund in `from`, and the failure reason it records; `None`: refused.
pub fn transition(
    from: RefundState,
    action: Action,
) -> Option<(RefundState, Option<&'static str>)> {
    use {Action::*, RefundState::*};
    let open = matches!(from, Created | Processing);
    match action {
        Confirm if from == Created => Some((Processing, None)),
        Settle if open => Some((Succeeded, None)),
        BurnNonce if open => Some((Failed, Some("nonce_used_otherwise"))),
        CancelAuthorization if open => Some((Failed, Some("authorization_canceled"))),
        Expire if open => Some((Failed, Some("authorization_expired"))),
        _ => None,
    }
}

/// The event a change to `to` writes.
pub fn event_type(to: RefundState) -> String {
    format!("refund.{to}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refunds_move_forward_only_and_end_succeeded_or_failed() {
        use Action::*;
        assert_eq!(
            transition(RefundState::Created, Confirm),
            Some((RefundState::Processing, None))
        );
        assert_eq!(transition(RefundState::Processing, Confirm), None);
        assert_eq!(
            transition(RefundState::Created, Settle),
            Some((RefundState::Succeeded, None))
        );
        for done in [RefundState::Succeeded, RefundState::Failed] {
            for action in [Confirm, Settle, BurnNonce, CancelAuthorization, Expire] {
                assert_eq!(transition(done, action), None, "{done} is final");
            }
        }
        for state in [
            RefundState::Created,
            RefundState::Processing,
            RefundState::Succeeded,
            RefundState::Failed,
        ] {
            assert!(crate::events::TYPES.contains(&event_type(state).as_str()));
        }
    }
}
