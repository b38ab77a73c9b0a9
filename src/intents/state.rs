//! The intent state machine. Its whole behaviour is the [`TRANSITIONS`] table: the settlement
//! states (`processing`, `succeeded`, `failed`) are variants and rows here; handlers, the
//! repository, the sweeper and the payment watch only ask it (`docs/settlement.md`).

use std::fmt;

/// Where an intent is in its life: stored, and answered, as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum IntentState {
    Created,
    Canceled,
    /// The payer's signed authorization is stored and queued for the chain.
    Processing,
    /// The payment is confirmed on chain.
    Succeeded,
    /// It can never be paid: the authorization expired or its nonce was used for something else.
    Failed,
}

/// Something that moves an intent from one state to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The merchant cancels (`POST /v1/payment_intents/{id}/cancel`).
    Cancel,
    /// The intent's time ran out: by the clock (the sweeper), or with settlement on by a
    /// confirmed block's timestamp (the payment watch).
    Expire,
    /// The payer's authorization was accepted (`POST …/confirm`).
    Confirm,
    /// A confirmed transaction used the intent's nonce and moved exactly what it asks.
    Settle,
    /// A confirmed transaction used the intent's nonce for another amount or recipient.
    BurnNonce,
    /// The payer canceled the intent's authorization on chain (EIP-3009 `cancelAuthorization`).
    CancelAuthorization,
    /// The token refuses the payment for now (balance, pause, blacklist): the intent stays
    /// `processing` and says why.
    Hold,
    /// A confirmed transfer of its token reached its deposit address without paying it (short of
    /// the amount, beyond it, or after a cancel); the completing one is [`Action::Settle`].
    Deposit,
    /// A confirmed transfer of its token reached its deposit address after it expired.
    DepositAfterExpiry,
    /// Money reached an order another way than the option that pays it: recorded, in any state.
    DuplicatePayment,
}

/// Who made a state change, recorded with every transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Merchant(String),
    System,
    /// A confirmed block on the intent's chain.
    Chain,
    /// The intent's payer, through its checkout page (its client secret).
    Checkout,
}

/// Why an intent failed, as its `failure_reason` says. An intent that expired while the token
/// refused its payment keeps that refusal instead (`insufficient_balance`, …), which is none of
/// these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// Its authorization's `validBefore` passed, by the confirmed chain's time.
    AuthorizationExpired,
    /// Its payer used the nonce on another transfer.
    NonceUsedOtherwise,
    /// Its payer canceled the authorization on chain.
    AuthorizationCanceled,
}

impl FailureReason {
    const ALL: [Self; 3] = [
        Self::AuthorizationExpired,
        Self::NonceUsedOtherwise,
        Self::AuthorizationCanceled,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AuthorizationExpired => "authorization_expired",
            Self::NonceUsedOtherwise => "nonce_used_otherwise",
            Self::AuthorizationCanceled => "authorization_canceled",
        }
    }

    pub fn parse(stored: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == stored)
    }
}

/// One allowed move: in `from`, `action` leads to `to`, recording `cancellation_reason` or
/// `failure_reason` if set, and announced by `event` (default `payment_intent.<to>`).
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    pub from: IntentState,
    pub action: Action,
    pub to: IntentState,
    pub cancellation_reason: Option<&'static str>,
    pub failure_reason: Option<FailureReason>,
    pub event: Option<&'static str>,
}

impl Transition {
    const fn new(from: IntentState, action: Action, to: IntentState) -> Self {
        Self {
            from,
            action,
            to,
            cancellation_reason: None,
            failure_reason: None,
            event: None,
        }
    }

    const fn canceling(self, reason: &'static str) -> Self {
        Self {
            cancellation_reason: Some(reason),
            ..self
        }
    }

    const fn failing(self, reason: FailureReason) -> Self {
        Self {
            failure_reason: Some(reason),
            ..self
        }
    }

    const fn announced_as(self, event: &'static str) -> Self {
        Self {
            event: Some(event),
            ..self
        }
    }

    /// The type of the event this transition writes.
    pub fn event_type(&self) -> String {
        match self.event {
            Some(event) => event.to_owned(),
            None => format!("payment_intent.{}", self.to),
        }
    }
}

/// Every allowed transition. Anything not listed is refused with 409 invalid_state_transition.
pub const TRANSITIONS: &[Transition] = &[
    Transition::new(IntentState::Created, Action::Cancel, IntentState::Canceled)
        .canceling("merchant_request"),
    Transition::new(IntentState::Created, Action::Expire, IntentState::Canceled)
        .canceling("expired"),
    Transition::new(
        IntentState::Created,
        Action::Confirm,
        IntentState::Processing,
    ),
    // Who submits the authorization does not matter: a payer may send it without confirm.
    Transition::new(IntentState::Created, Action::Settle, IntentState::Succeeded),
    Transition::new(
        IntentState::Processing,
        Action::Settle,
        IntentState::Succeeded,
    ),
    // The chain is the source of truth: a payer who signed before the merchant canceled can still
    // pay. The intent stays canceled (the merchant's decision), the payment is recorded on it.
    Transition::new(IntentState::Canceled, Action::Settle, IntentState::Canceled)
        .announced_as("payment_intent.paid_after_cancel"),
    Transition::new(IntentState::Processing, Action::Expire, IntentState::Failed)
        .failing(FailureReason::AuthorizationExpired),
    Transition::new(IntentState::Created, Action::BurnNonce, IntentState::Failed)
        .failing(FailureReason::NonceUsedOtherwise),
    Transition::new(
        IntentState::Processing,
        Action::BurnNonce,
        IntentState::Failed,
    )
    .failing(FailureReason::NonceUsedOtherwise),
    Transition::new(
        IntentState::Created,
        Action::CancelAuthorization,
        IntentState::Failed,
    )
    .failing(FailureReason::AuthorizationCanceled),
    Transition::new(
        IntentState::Processing,
        Action::CancelAuthorization,
        IntentState::Failed,
    )
    .failing(FailureReason::AuthorizationCanceled),
    Transition::new(
        IntentState::Processing,
        Action::Hold,
        IntentState::Processing,
    )
    .announced_as("payment_intent.payment_pending"),
    // Deposit addresses (`docs/settlement.md`, "Deposit addresses"): what arrives is recorded
    // and announced whatever the intent can still do, never counted as paying it once closed.
    Transition::new(IntentState::Created, Action::Deposit, IntentState::Created)
        .announced_as("payment_intent.partially_paid"),
    Transition::new(
        IntentState::Succeeded,
        Action::Deposit,
        IntentState::Succeeded,
    )
    .announced_as("payment_intent.overpaid"),
    Transition::new(
        IntentState::Canceled,
        Action::Deposit,
        IntentState::Canceled,
    )
    .announced_as("payment_intent.paid_after_cancel"),
    Transition::new(
        IntentState::Canceled,
        Action::DepositAfterExpiry,
        IntentState::Canceled,
    )
    .announced_as("payment_intent.paid_after_expiry"),
    // Orders (`docs/settlement.md`, "Orders and options"): a second payment changes no state.
    Transition::new(
        IntentState::Created,
        Action::DuplicatePayment,
        IntentState::Created,
    )
    .announced_as(DUPLICATE_PAYMENT),
    Transition::new(
        IntentState::Processing,
        Action::DuplicatePayment,
        IntentState::Processing,
    )
    .announced_as(DUPLICATE_PAYMENT),
    Transition::new(
        IntentState::Succeeded,
        Action::DuplicatePayment,
        IntentState::Succeeded,
    )
    .announced_as(DUPLICATE_PAYMENT),
    Transition::new(
        IntentState::Canceled,
        Action::DuplicatePayment,
        IntentState::Canceled,
    )
    .announced_as(DUPLICATE_PAYMENT),
    Transition::new(
        IntentState::Failed,
        Action::DuplicatePayment,
        IntentState::Failed,
    )
    .announced_as(DUPLICATE_PAYMENT),
];

const DUPLICATE_PAYMENT: &str = "payment_intent.duplicate_payment";

/// What a confirmed transfer to an intent's deposit address does, the intent being in `state`
/// (canceled for `cancellation_reason`): `reaches` says whether what it received now, this
/// transfer included, pays its amount (within the tolerance).
pub fn deposit_action(
    state: IntentState,
    cancellation_reason: Option<&str>,
    reaches: bool,
) -> Action {
    match state {
        IntentState::Created if reaches => Action::Settle,
        IntentState::Canceled if cancellation_reason == Some("expired") => {
            Action::DepositAfterExpiry
        }
        _ => Action::Deposit,
    }
}

/// The transition `action` takes from `from`, if the machine allows it.
pub fn transition(from: IntentState, action: Action) -> Option<&'static Transition> {
    TRANSITIONS
        .iter()
        .find(|t| t.from == from && t.action == action)
}

/// The transitions `action` may take, one per source state (the sweeper's and the payment watch's work).
pub fn sources_of(action: Action) -> Vec<&'static Transition> {
    TRANSITIONS.iter().filter(|t| t.action == action).collect()
}

impl IntentState {
    pub const ALL: [IntentState; 5] = [
        IntentState::Created,
        IntentState::Canceled,
        IntentState::Processing,
        IntentState::Succeeded,
        IntentState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Canceled => "canceled",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == raw)
    }
}

impl fmt::Display for IntentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Expire => "expire",
            Self::Confirm => "confirm",
            Self::Settle => "settle",
            Self::BurnNonce => "burn_nonce",
            Self::CancelAuthorization => "cancel_authorization",
            Self::Hold => "hold",
            Self::Deposit => "deposit",
            Self::DepositAfterExpiry => "deposit_after_expiry",
            Self::DuplicatePayment => "duplicate_payment",
        }
    }
}

impl Actor {
    pub fn label(&self) -> String {
        match self {
            Self::Merchant(id) => format!("merchant:{id}"),
            Self::System => "system".to_owned(),
            Self::Chain => "chain".to_owned(),
            Self::Checkout => "checkout".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_intents_can_be_canceled_or_expire_and_canceled_is_final() {
        let cancel = transition(IntentState::Created, Action::Cancel).unwrap();
        assert_eq!(
            (cancel.to, cancel.cancellation_reason),
            (IntentState::Canceled, Some("merchant_request"))
        );
        let expire = transition(IntentState::Created, Action::Expire).unwrap();
        assert_eq!(
            (expire.to, expire.cancellation_reason),
            (IntentState::Canceled, Some("expired"))
        );
        assert!(transition(IntentState::Canceled, Action::Cancel).is_none());
        assert!(transition(IntentState::Canceled, Action::Expire).is_none());
    }

    #[test]
    fn settlement_moves_forward_only() {
        let confirm = transition(IntentState::Created, Action::Confirm).unwrap();
        assert_eq!(confirm.to, IntentState::Processing);
        assert_eq!(confirm.event_type(), "payment_intent.processing");
        // Once the authorization is on its way, the merchant can no longer cancel.
        assert!(transition(IntentState::Processing, Action::Cancel).is_none());
        let expire = transition(IntentState::Processing, Action::Expire).unwrap();
        assert_eq!(
            (expire.to, expire.failure_reason),
            (
                IntentState::Failed,
                Some(FailureReason::AuthorizationExpired)
            )
        );
        let late = transition(IntentState::Canceled, Action::Settle).unwrap();
        assert_eq!(late.to, IntentState::Canceled);
        assert_eq!(late.event_type(), "payment_intent.paid_after_cancel");
        for done in [IntentState::Succeeded, IntentState::Failed] {
            for action in [
                Action::Cancel,
                Action::Expire,
                Action::Confirm,
                Action::Settle,
                Action::BurnNonce,
                Action::CancelAuthorization,
                Action::Hold,
            ] {
                assert!(transition(done, action).is_none(), "{done} is final");
            }
        }
    }

    #[test]
    fn deposits_pay_an_open_intent_and_are_announced_on_a_closed_one() {
        let event = |state, reason, reaches| {
            transition(state, deposit_action(state, reason, reaches))
                .map(|t| (t.to, t.event_type()))
        };
        assert_eq!(
            event(IntentState::Created, None, false),
            Some((IntentState::Created, "payment_intent.partially_paid".into()))
        );
        assert_eq!(
            event(IntentState::Created, None, true),
            Some((IntentState::Succeeded, "payment_intent.succeeded".into()))
        );
        assert_eq!(
            event(IntentState::Succeeded, None, true),
            Some((IntentState::Succeeded, "payment_intent.overpaid".into()))
        );
        assert_eq!(
            event(IntentState::Canceled, Some("merchant_request"), true),
            Some((
                IntentState::Canceled,
                "payment_intent.paid_after_cancel".into()
            ))
        );
        assert_eq!(
            event(IntentState::Canceled, Some("expired"), true),
            Some((
                IntentState::Canceled,
                "payment_intent.paid_after_expiry".into()
            ))
        );
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for state in IntentState::ALL {
            assert_eq!(IntentState::parse(state.as_str()), Some(state));
        }
        assert_eq!(IntentState::parse("settled"), None);
    }

    #[test]
    fn every_transition_announces_a_known_event_type() {
        for t in TRANSITIONS {
            let kind = t.event_type();
            assert!(
                crate::events::TYPES.contains(&kind.as_str()),
                "{kind} is not in events::TYPES"
            );
        }
    }

    #[test]
    fn each_state_has_at_most_one_move_per_action() {
        for (i, a) in TRANSITIONS.iter().enumerate() {
            for b in &TRANSITIONS[i + 1..] {
                assert!(
                    !(a.from == b.from && a.action == b.action),
                    "{:?} from {} is listed twice",
                    a.action,
                    a.from
                );
            }
        }
    }
}
