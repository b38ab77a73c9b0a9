//! The states of a payment intent.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    Created,
    Canceled,
}

impl IntentState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Canceled => "canceled",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "created" => Some(Self::Created),
            "canceled" => Some(Self::Canceled),
            _ => None,
        }
    }
}
