//! The intent state machine. Its whole behaviour is the [`TRANSITIONS`] table: adding the later
//! states (submitted, settling, settled, failed) means adding variants and rows here, not
//! touching handlers, the repository or the sweeper.

use std::fmt;

/// Where an intent is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentState {
    Created,
    Canceled,
}

/// Something that moves an intent from one state to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The merchant cancels (`POST /v1/payment_intents/{id}/cancel`).
    Cancel,
    /// The system cancels an intent whose `expires_at` passed (the expiry sweeper).
    Expire,
}

/// Who made a state change, recorded with every transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Merchant(String),
    System,
}

/// One allowed move: in `from`, `action` leads to `to`, recording `cancellation_reason` if set.
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    pub from: IntentState,
    pub action: Action,
    pub to: IntentState,
    pub cancellation_reason: Option<&'static str>,
}

/// Every allowed transition. Anything not listed is refused with 409 invalid_state_transition.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        from: IntentState::Created,
        action: Action::Cancel,
        to: IntentState::Canceled,
        cancellation_reason: Some("merchant_request"),
    },
    Transition {
        from: IntentState::Created,
        action: Action::Expire,
        to: IntentState::Canceled,
        cancellation_reason: Some("expired"),
    },
];

/// The transition `action` takes from `from`, if the machine allows it.
pub fn transition(from: IntentState, action: Action) -> Option<&'static Transition> {
    TRANSITIONS
        .iter()
        .find(|t| t.from == from && t.action == action)
}

/// The states from which `action` is allowed, all leading to one state (the sweeper's work list).
pub fn sources_of(action: Action) -> Vec<&'static Transition> {
    TRANSITIONS.iter().filter(|t| t.action == action).collect()
}

impl IntentState {
    pub const ALL: [IntentState; 2] = [IntentState::Created, IntentState::Canceled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Canceled => "canceled",
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
        }
    }
}

impl Actor {
    pub fn label(&self) -> String {
        match self {
            Self::Merchant(id) => format!("merchant:{id}"),
            Self::System => "system".to_owned(),
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
    fn states_round_trip_through_their_names() {
        for state in IntentState::ALL {
            assert_eq!(IntentState::parse(state.as_str()), Some(state));
        }
        assert_eq!(IntentState::parse("settled"), None);
    }

    #[test]
    fn each_action_leads_to_one_state() {
        for action in [Action::Cancel, Action::Expire] {
            let targets: Vec<_> = sources_of(action)
                .iter()
                .map(|t| (t.to, t.cancellation_reason))
                .collect();
            assert!(
                targets.windows(2).all(|w| w[0] == w[1]),
                "{action:?} must have one outcome"
            );
        }
    }
}
