//! The dashboard's HTML, rendered on the server with `maud`, which escapes every value it is
//! given: a merchant's metadata, display names, emails and URLs are shown, never run. Each page
//! has one `<h1>` that says where it is, its `<title>` the same, and the navigation landmark.

use maud::{DOCTYPE, Markup, html};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use super::{
    people::{Permission, Role, User},
    sessions::Session,
    text::Text,
};
use crate::{
    audit,
    auth::KeySummary,
    events::store::Change,
    intents::{domain::Chain, repo::PaymentIntent, state::IntentState},
    ledger::{IntentPosting, routes::Balances},
    merchants::Merchant,
    rails::tokens::in_units,
    ways_to_pay::refunds::{domain::RefundMethod, repo::Refund, state::RefundState},
    webhooks::{
        delivery::{EndpointDelivery, SubjectDelivery},
        endpoints::Endpoint,
    },
};

/// The dashboard's sections, as the navigation lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Payments,
    Balances,
    Webhooks,
    ApiKeys,
    Team,
    Settings,
    Export,
    AuditLog,
}

impl Section {
    const ALL: [Section; 8] = [
        Section::Payments,
        Section::Balances,
        Section::Webhooks,
        Section::ApiKeys,
        Section::Team,
        Section::Settings,
        Section::Export,
        Section::AuditLog,
    ];

    fn path(self) -> &'static str {
        match self {
            Self::Payments => "/dashboard/payments",
            Self::Balances => "/dashboard/balances",
            Self::Webhooks => "/dashboard/webhooks",
            Self::ApiKeys => "/dashboard/api-keys",
            Self::Team => "/dashboard/team",
            Self::Settings => "/dashboard/settings",
            Self::Export => "/dashboard/export",
            Self::AuditLog => "/dashboard/audit",
        }
    }

    fn name(self, t: &Text) -> &'static str {
        match self {
            Self::Payments => t.payments,
            Self::Balances => t.balances,
            Self::Webhooks => t.webhooks,
            Self::ApiKeys => t.api_keys,
            Self::Team => t.team,
            Self::Settings => t.settings,
            Self::Export => t.export,
            Self::AuditLog => t.audit_log,
        }
    }
}

/// The page around a section's content: the language, title, navigation (for a signed-in
/// person), the sign-out form and the language switch.
pub fn layout(
    t: &Text,
    language: &str,
    title: &str,
    session: Option<(&Session, Section)>,
    content: Markup,
) -> Markup {
    let other = if language == "zh-TW" { "en" } else { "zh-TW" };
    let switch = html! {
        a.language href={ "?lang=" (other) } lang=(other) hreflang=(other) { (t.language) }
    };
    html! {
        (DOCTYPE)
        html lang=(language) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · " (t.dashboard) }
                link rel="stylesheet" href="/dashboard/assets/dashboard.css";
            }
            body {
                a.skip href="#main" { (t.skip_to_content) }
                header.top {
                    p.brand { (t.dashboard) }
                    @if let Some((session, current)) = session {
                        nav aria-label=(t.navigation) {
                            ul {
                                @for section in Section::ALL {
                                    li {
                                        a href=(section.path())
                                          aria-current=[(section == current).then_some("page")] {
                                            (section.name(t))
                                        }
                                    }
                                }
                            }
                        }
                        div.who {
                            span { (t.signed_in_as) " " (session.user.email) " (" (role_name(t, session.role())) ")" }
                            form method="post" action="/dashboard/logout" {
                                (csrf(session))
                                button type="submit" { (t.sign_out) }
                            }
                            (switch)
                        }
                    } @else {
                        (switch)
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (content)
                }
            }
        }
    }
}

/// The hidden field every form of a signed-in page carries.
pub fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf_token); }
}

pub fn role_name(t: &Text, role: Role) -> &'static str {
    match role {
        Role::Owner => t.owner,
        Role::Developer => t.developer,
        Role::Viewer => t.viewer,
    }
}

/// A block's confirmations as the follower has read the chain: the block itself is the first.
fn confirmations(followed_up_to: Option<i64>, block: u64) -> String {
    match followed_up_to {
        Some(head) => (head - block as i64 + 1).max(0).to_string(),
        None => "—".to_owned(),
    }
}

fn when(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

fn maybe_when(at: Option<OffsetDateTime>) -> String {
    at.map(when).unwrap_or_else(|| "—".to_owned())
}

/// A notice at the top of a page: `role="status"` for good news, `role="alert"` for refusals.
pub fn notice(message: Option<&str>, alert: bool) -> Markup {
    html! {
        @if let Some(message) = message {
            @if alert { p.notice.alert role="alert" { (message) } }
            @else { p.notice role="status" { (message) } }
        }
    }
}

/// `check` ties the form to the browser that loaded it (its cookie holds the same).
pub fn sign_in(
    t: &Text,
    check: &str,
    email: &str,
    problem: Option<&str>,
    good_news: Option<&str>,
) -> Markup {
    html! {
        (notice(problem, true))
        (notice(good_news, false))
        form.card method="post" action="/dashboard/login" {
            input type="hidden" name="check" value=(check);
            label for="email" { (t.email) }
            input id="email" name="email" type="email" autocomplete="username" required value=(email);
            label for="password" { (t.password) }
            input id="password" name="password" type="password" autocomplete="current-password" required;
            button type="submit" { (t.sign_in) }
        }
    }
}

pub fn set_password(t: &Text, token: &str, email: &str, problem: Option<&str>) -> Markup {
    html! {
        (notice(problem, true))
        form.card method="post" action="/dashboard/password" {
            input type="hidden" name="token" value=(token);
            label for="email" { (t.email) }
            input id="email" type="email" autocomplete="username" readonly value=(email);
            label for="password" { (t.password) }
            input id="password" name="password" type="password" autocomplete="new-password"
                  minlength="12" required aria-describedby="password-hint";
            p.hint id="password-hint" { (t.password_hint) }
            button type="submit" { (t.save) }
        }
    }
}

/// The filters and search of the payments page, as its links carry them on.
pub struct PaymentsQuery<'a> {
    pub state: Option<IntentState>,
    pub search: &'a str,
}

/// `units` are each intent's token symbol and decimals, when read.
pub fn payments(
    t: &Text,
    query: &PaymentsQuery<'_>,
    intents: &[PaymentIntent],
    units: &[(Option<String>, Option<u8>)],
    next: Option<&str>,
    is_first: bool,
) -> Markup {
    let carried = |after: Option<&str>| {
        let mut pairs = url::form_urlencoded::Serializer::new(String::new());
        if let Some(state) = query.state {
            pairs.append_pair("state", state.as_str());
        }
        if !query.search.is_empty() {
            pairs.append_pair("q", query.search);
        }
        if let Some(after) = after {
            pairs.append_pair("after", after);
        }
        format!("/dashboard/payments?{}", pairs.finish())
    };
    html! {
        form.filters method="get" action="/dashboard/payments" role="search" {
            div {
                label for="state" { (t.state) }
                select id="state" name="state" {
                    option value="" { (t.any_state) }
                    @for state in IntentState::ALL {
                        option value=(state.as_str()) selected[query.state == Some(state)] { (state.as_str()) }
                    }
                }
            }
            div.grow {
                label for="q" { (t.search) }
                input id="q" name="q" type="search" value=(query.search) aria-describedby="q-hint";
                p.hint id="q-hint" { (t.search_hint) }
            }
            button type="submit" { (t.search) }
        }
        @if intents.is_empty() {
            p { (t.no_payments) }
        } @else {
            div.table {
                table {
                    thead { tr {
                        th scope="col" { (t.id) }
                        th scope="col" { (t.state) }
                        th scope="col" { (t.amount) }
                        th scope="col" { (t.chain) }
                        th scope="col" { (t.method) }
                        th scope="col" { (t.created) }
                    } }
                    tbody {
                        @for (intent, (symbol, decimals)) in intents.iter().zip(units) {
                            tr {
                                td { a href={ "/dashboard/payments/" (intent.id) } { code { (intent.id) } } }
                                td { span.state { (intent.state.as_str()) } }
                                td.number {
                                    @if let Some(c) = &intent.currency { (intent.amount) " " (c.as_str()) }
                                    @else if let Some(d) = decimals { (in_units(&intent.amount, *d)) " " (symbol.as_deref().unwrap_or("")) }
                                    @else { (intent.amount) }
                                }
                                td { (intent.chain.as_deref().unwrap_or("—")) }
                                td { (intent.payment_method.map(|m| m.as_str()).unwrap_or("—")) }
                                td { (when(intent.created_at)) }
                            }
                        }
                    }
                }
            }
        }
        nav.pages aria-label=(t.payments) {
            @if !is_first { a href=(carried(None)) { (t.first_page) } }
            @if let Some(next) = next { a href=(carried(Some(next))) rel="next" { (t.next_page) } }
        }
    }
}

/// Everything the payment page shows of one intent.
pub struct PaymentView<'a> {
    pub intent: &'a PaymentIntent,
    /// The token's symbol and decimals, when read.
    pub units: (Option<String>, Option<u8>),
    pub changes: &'a [Change],
    pub postings: &'a [IntentPosting],
    pub refunds: &'a [Refund],
    pub deliveries: &'a [SubjectDelivery],
    /// The newest block the follower of the intent's chain has read.
    pub followed_up_to: Option<i64>,
}

/// `refund_form` is the one-time id of the page's refund form.
pub fn payment(
    t: &Text,
    session: &Session,
    view: &PaymentView<'_>,
    done: Option<&str>,
    refund_form: &str,
) -> Markup {
    let intent = view.intent;
    let (symbol, decimals) = &view.units;
    let shown = |base_units: &str| match decimals {
        Some(d) => format!(
            "{} {}",
            in_units(base_units, *d),
            symbol.as_deref().unwrap_or("")
        ),
        None => format!("{base_units} (base units)"),
    };
    let metadata = serde_json::to_string_pretty(&intent.metadata).unwrap_or_default();
    html! {
        (notice(done, false))
        dl.fields {
            dt { (t.id) } dd { code { (intent.id) } }
            dt { (t.state) } dd { span.state { (intent.state.as_str()) } }
            dt { (t.amount) } dd {
                @if intent.currency.is_some() { (intent.amount) " " (intent.currency.map(|c| c.as_str()).unwrap_or_default()) }
                @else { (shown(&intent.amount)) }
            }
            dt { (t.chain) } dd { (intent.chain.as_deref().unwrap_or("—")) }
            dt { (t.token) } dd { code { (intent.token.as_deref().unwrap_or("—")) } }
            dt { (t.method) } dd { (intent.payment_method.map(|m| m.as_str()).unwrap_or("—")) }
            @if let Some(payer) = &intent.payer { dt { (t.payer) } dd { code { (payer) } } }
            @if let Some(address) = &intent.deposit_address { dt { (t.deposit_address) } dd { code { (address) } } }
            dt { (t.created) } dd { (when(intent.created_at)) }
            dt { (t.expires) } dd { (when(intent.expires_at)) }
            @if let Some(reason) = intent.cancellation_reason.as_deref().or(intent.failure_reason.as_deref()).or(intent.pending_reason.as_deref()) {
                dt { (t.reason) } dd { (reason) }
            }
            dt { (t.metadata) } dd { pre { (metadata) } }
        }
        @if intent.state == IntentState::Succeeded && session.role().may(Permission::Refund) {
            form.card method="post" action={ "/dashboard/payments/" (intent.id) "/refunds" } {
                (csrf(session))
                input type="hidden" name="form" value=(refund_form);
                h2 { (t.refund) }
                label for="refund-amount" { (t.refund_amount) }
                input id="refund-amount" name="amount" inputmode="decimal" aria-describedby="refund-hint";
                p.hint id="refund-hint" { (t.refund_hint) }
                button type="submit" { (t.refund) }
            }
        }
        @if intent.state == IntentState::Created && session.role().may(Permission::Cancel) {
            form method="post" action={ "/dashboard/payments/" (intent.id) "/cancel" } {
                (csrf(session))
                button.danger type="submit" { (t.cancel_payment) }
            }
        }
        h2 { (t.timeline) }
        @if view.changes.is_empty() { p { (t.none) } } @else {
            ol.timeline {
                @for change in view.changes {
                    li { time datetime=(when(change.created_at)) { (when(change.created_at)) } " " code { (change.kind) } }
                }
            }
        }
        h2 { (t.transactions) }
        @let settled = intent.settlement.as_ref().map(|s| &s.0);
        @if settled.is_none() && view.refunds.iter().all(|r| r.settlement.is_none()) { p { (t.none) } } @else {
            div.table { table {
                thead { tr {
                    th scope="col" { (t.transaction) } th scope="col" { (t.block) }
                    th scope="col" { (t.confirmations) } th scope="col" { (t.at) }
                } }
                tbody {
                    @for s in settled.into_iter().chain(view.refunds.iter().filter_map(|r| r.settlement.as_ref().map(|s| &s.0))) {
                        tr {
                            td { code { (s.transaction_hash) } }
                            td.number { (s.block_number) }
                            td.number { (confirmations(view.followed_up_to, s.block_number)) }
                            td { (when(s.block_timestamp)) }
                        }
                    }
                }
            } }
        }
        h2 { (t.ledger) }
        @if view.postings.is_empty() { p { (t.none) } } @else {
            div.table { table {
                thead { tr { th scope="col" { "#" } th scope="col" { (t.event) } th scope="col" { (t.account) } th scope="col" { (t.amount) } th scope="col" { (t.transaction) } } }
                tbody {
                    @for posting in view.postings {
                        tr {
                            td.number { (posting.entry_id) }
                            td { (posting.kind) }
                            td { code { (posting.account) } }
                            td.number { (posting.amount) }
                            td { code { (posting.transaction_hash) } }
                        }
                    }
                }
            } }
        }
        h2 { (t.refunds) }
        @if view.refunds.is_empty() { p { (t.none) } } @else {
            div.table { table {
                thead { tr { th scope="col" { (t.id) } th scope="col" { (t.state) } th scope="col" { (t.amount) } th scope="col" { (t.created) } } }
                tbody {
                    @for refund in view.refunds {
                        tr {
                            td { a href={ "/dashboard/refunds/" (refund.id) } { code { (refund.id) } } }
                            td { (refund.state.as_str()) }
                            td.number { (shown(&refund.amount)) }
                            td { (when(refund.created_at)) }
                        }
                    }
                }
            } }
        }
        h2 { (t.deliveries) }
        @if view.deliveries.is_empty() { p { (t.none) } } @else {
            div.table { table {
                thead { tr { th scope="col" { (t.event) } th scope="col" { (t.endpoint) } th scope="col" { (t.state) } th scope="col" { (t.attempts) } th scope="col" { (t.response) } } }
                tbody {
                    @for delivery in view.deliveries {
                        tr {
                            td { code { (delivery.event_type) } }
                            td { (delivery.endpoint_url.as_deref().unwrap_or("—")) }
                            td { (delivery.state) }
                            td.number { (delivery.attempts) }
                            td { @if let Some(status) = delivery.last_status { (status) } @else { (delivery.last_error.as_deref().unwrap_or("—")) } }
                        }
                    }
                }
            } }
        }
    }
}

/// The API keys page; `new_secret` is a key just made, shown this once.
pub fn api_keys(
    t: &Text,
    session: &Session,
    keys: &[KeySummary],
    new_secret: Option<&str>,
) -> Markup {
    let manages = session.role().may(Permission::ManageApiKeys);
    html! {
        @if let Some(secret) = new_secret {
            section.card.secret aria-labelledby="new-key" {
                h2 id="new-key" { (t.new_key) }
                p role="status" { (t.secret_once) }
                p { code.secret { (secret) } }
            }
        }
        div.table { table {
            thead { tr {
                th scope="col" { (t.prefix) } th scope="col" { (t.created) } th scope="col" { (t.last_used) }
                th scope="col" { (t.expires) } th scope="col" { (t.revoked) }
                @if manages { th scope="col" { span.visually-hidden { (t.revoke) } } }
            } }
            tbody {
                @for key in keys {
                    tr {
                        td { code { (key.prefix.as_deref().unwrap_or("—")) } }
                        td { (when(key.created_at)) }
                        td { (maybe_when(key.last_used_at)) }
                        td { (maybe_when(key.expires_at)) }
                        td { (maybe_when(key.revoked_at)) }
                        @if manages {
                            td {
                                @if let (Some(prefix), None) = (&key.prefix, key.revoked_at) {
                                    form method="post" action="/dashboard/api-keys/revoke" {
                                        (csrf(session))
                                        input type="hidden" name="prefix" value=(prefix);
                                        button.danger type="submit" aria-label={ (t.revoke) " " (prefix) } { (t.revoke) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        } }
        @if manages {
            div.actions {
                form method="post" action="/dashboard/api-keys" {
                    (csrf(session))
                    button type="submit" { (t.create_key) }
                }
                form method="post" action="/dashboard/api-keys/rotate" {
                    (csrf(session))
                    label for="overlap" { (t.overlap_seconds) }
                    input id="overlap" name="old_expires_in" type="number" min="0" max="2592000" value="3600" required aria-describedby="overlap-hint";
                    p.hint id="overlap-hint" { (t.rotate_hint) }
                    button type="submit" { (t.rotate) }
                }
            }
        }
    }
}

/// The team page; `invited` is a one-time link just made, shown this once.
pub fn team(
    t: &Text,
    session: &Session,
    people: &[User],
    invited: Option<&str>,
    problem: Option<&str>,
) -> Markup {
    let manages = session.role().may(Permission::ManageTeam);
    html! {
        (notice(problem, true))
        @if let Some(link) = invited {
            section.card.secret aria-labelledby="invited" {
                h2 id="invited" { (t.invite) }
                p role="status" { (t.invite_link_once) }
                p { code.secret { (link) } }
            }
        }
        div.table { table {
            thead { tr {
                th scope="col" { (t.email) } th scope="col" { (t.role) } th scope="col" { (t.state) } th scope="col" { (t.created) }
                @if manages { th scope="col" { span.visually-hidden { (t.change_role) } } }
            } }
            tbody {
                @for person in people {
                    tr {
                        td { (person.email) }
                        td { (role_name(t, person.role)) }
                        td { @if person.active { (t.active) } @else { (t.pending) } }
                        td { (when(person.created_at)) }
                        @if manages {
                            td {
                                form.inline method="post" action={ "/dashboard/team/" (person.id) } {
                                    (csrf(session))
                                    label.visually-hidden for={ "role-" (person.id) } { (t.role) " " (person.email) }
                                    select id={ "role-" (person.id) } name="role" {
                                        @for role in Role::ALL {
                                            option value=(role.as_str()) selected[role == person.role] { (role_name(t, role)) }
                                        }
                                    }
                                    button type="submit" name="do" value="change" { (t.change_role) }
                                    button.danger type="submit" name="do" value="remove" aria-label={ (t.remove) " " (person.email) } { (t.remove) }
                                }
                            }
                        }
                    }
                }
            }
        } }
        @if manages {
            form.card method="post" action="/dashboard/team" {
                (csrf(session))
                h2 { (t.invite) }
                label for="invite-email" { (t.email) }
                input id="invite-email" name="email" type="email" required;
                label for="invite-role" { (t.role) }
                select id="invite-role" name="role" {
                    @for role in Role::ALL {
                        option value=(role.as_str()) selected[role == Role::Viewer] { (role_name(t, role)) }
                    }
                }
                button type="submit" { (t.invite) }
            }
        }
    }
}

pub fn audit_log(t: &Text, lines: &[audit::Line], next: Option<i64>) -> Markup {
    html! {
        @if lines.is_empty() { p { (t.none) } } @else {
            div.table { table {
                thead { tr {
                    th scope="col" { (t.at) } th scope="col" { (t.actor) } th scope="col" { (t.action) }
                    th scope="col" { (t.target) } th scope="col" { (t.address) }
                } }
                tbody {
                    @for line in lines {
                        tr {
                            td { (when(line.at)) }
                            td { (line.actor) }
                            td { code { (line.action) } }
                            td { (line.target.as_deref().unwrap_or("—")) }
                            td { (line.address.as_deref().unwrap_or("—")) }
                        }
                    }
                }
            } }
        }
        @if let Some(next) = next {
            nav.pages aria-label=(t.audit_log) { a href={ "/dashboard/audit?before=" (next) } rel="next" { (t.next_page) } }
        }
    }
}

/// Each balance with its token's symbol and decimals, when read.
pub fn balances(t: &Text, balances: &Balances, units: &[(Option<String>, Option<u8>)]) -> Markup {
    html! {
        @if balances.data.is_empty() { p { (t.no_balances) } } @else {
            div.table { table {
                thead { tr {
                    th scope="col" { (t.chain) } th scope="col" { (t.token) }
                    th scope="col" { (t.amount) } th scope="col" { (t.base_units) }
                } }
                tbody {
                    @for (balance, (symbol, decimals)) in balances.data.iter().zip(units) {
                        tr {
                            td { (balance.chain) }
                            td { code { (balance.token) } }
                            td.number {
                                @if let Some(d) = decimals { (signed_units(&balance.amount, *d)) " " (symbol.as_deref().unwrap_or("")) }
                                @else { "—" }
                            }
                            td.number { (balance.amount) }
                        }
                    }
                }
            } }
        }
        @if !balances.totals.is_empty() {
            h2 { (t.per_currency) }
            div.table { table {
                thead { tr { th scope="col" { (t.currency) } th scope="col" { (t.amount) } } }
                tbody {
                    @for total in &balances.totals {
                        tr { td { (total.currency.as_str()) } td.number { (total.amount) } }
                    }
                }
            } }
        }
    }
}

/// Signed base units in the token's units: a balance can be negative after refunds.
fn signed_units(base_units: &str, decimals: u8) -> String {
    match base_units.strip_prefix('-') {
        Some(magnitude) => format!("-{}", in_units(magnitude, decimals)),
        None => in_units(base_units, decimals),
    }
}

pub fn settings(
    t: &Text,
    session: &Session,
    merchant: &Merchant,
    served: &[&str],
    saved: bool,
) -> Markup {
    let manages = session.role().may(Permission::ManageSettings);
    html! {
        (notice(saved.then_some(t.saved), false))
        form.card method="post" action="/dashboard/settings" {
            (csrf(session))
            label for="display-name" { (t.display_name) }
            input id="display-name" name="display_name" maxlength="100" required
                  value=(merchant.display_name.as_deref().unwrap_or("")) aria-describedby="display-name-hint"
                  readonly[!manages];
            p.hint id="display-name-hint" { (t.display_name_hint) }
            label for="payout-address" { (t.payout_address) }
            input id="payout-address" name="payout_address" maxlength="42" pattern="0x[0-9a-fA-F]{40}"
                  autocomplete="off" spellcheck="false"
                  value=(merchant.payout_address.as_deref().unwrap_or("")) aria-describedby="payout-address-hint"
                  readonly[!manages];
            p.hint id="payout-address-hint" { (t.payout_address_hint) }
            @if manages { button type="submit" { (t.save) } }
        }
        dl.fields {
            dt { (t.id) } dd { code { (merchant.id) } }
        }
        section aria-labelledby="accepted-assets" {
            h2 id="accepted-assets" { (t.accepted_assets) }
            p.hint { (t.accepted_assets_hint) }
            @if merchant.accepted_assets.is_empty() { p { (t.none) } } @else {
                div.table { table {
                    thead { tr {
                        th scope="col" { (t.chain) } th scope="col" { (t.token) } th scope="col" { (t.currency) }
                        th scope="col" { (t.decimals) } th scope="col" { (t.by_signature) }
                        @if manages { th scope="col" { span.visually-hidden { (t.remove) } } }
                    } }
                    tbody {
                        @for asset in &merchant.accepted_assets {
                            tr {
                                td { (asset.chain) }
                                td { (asset.symbol.as_deref().unwrap_or("")) " " code { (asset.token) } }
                                td { (asset.currency.as_str().to_uppercase()) }
                                td { (asset.decimals) }
                                td { (if asset.supports_authorization { t.yes } else { t.no }) }
                                @if manages {
                                    td {
                                        form.inline method="post" action="/dashboard/settings/assets" {
                                            (csrf(session))
                                            input type="hidden" name="chain" value=(asset.chain);
                                            input type="hidden" name="token" value=(asset.token);
                                            input type="hidden" name="currency" value=(asset.currency.as_str());
                                            button.danger type="submit" name="do" value="remove"
                                                aria-label={ (t.remove) " " (asset.symbol.as_deref().unwrap_or(&asset.token)) " " (asset.chain) " " (asset.currency.as_str().to_uppercase()) } { (t.remove) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                } }
            }
            @if manages {
                form.card method="post" action="/dashboard/settings/assets" {
                    (csrf(session))
                    label for="asset-chain" { (t.chain) }
                    select id="asset-chain" name="chain" required {
                        @for chain in served { option value=(chain) { (chain) } }
                    }
                    label for="asset-token" { (t.token_address) }
                    input id="asset-token" name="token" required maxlength="42" pattern="0x[0-9a-fA-F]{40}"
                          autocomplete="off" spellcheck="false";
                    label for="asset-currency" { (t.currency) }
                    select id="asset-currency" name="currency" {
                        option value="usd" { "USD" }
                        option value="eur" { "EUR" }
                    }
                    button type="submit" name="do" value="add" { (t.add_asset) }
                }
            }
        }
    }
}

/// The endpoints; `created` is one just made or given a new secret, its secret shown this once.
pub fn webhooks(
    t: &Text,
    session: &Session,
    endpoints: &[Endpoint],
    created: Option<&Endpoint>,
) -> Markup {
    let manages = session.role().may(Permission::ManageWebhooks);
    html! {
        @if let Some(secret) = created.and_then(|e| e.secret.as_deref()) {
            section.card.secret aria-labelledby="new-secret" {
                h2 id="new-secret" { (created.map(|e| e.url.as_str()).unwrap_or("")) }
                p role="status" { (t.endpoint_secret_once) }
                p { code.secret { (secret) } }
            }
        }
        @if endpoints.is_empty() { p { (t.no_endpoints) } } @else {
            div.table { table {
                thead { tr {
                    th scope="col" { (t.url) } th scope="col" { (t.state) } th scope="col" { (t.created) }
                    @if manages { th scope="col" { span.visually-hidden { (t.rotate_secret) } } }
                } }
                tbody {
                    @for endpoint in endpoints {
                        tr {
                            td {
                                a href={ "/dashboard/webhooks/" (endpoint.id) } { (endpoint.url) }
                                @if let Some(d) = &endpoint.description { br; span.hint { (d) } }
                            }
                            td { (endpoint.state) }
                            td { (when(endpoint.created_at)) }
                            @if manages {
                                td {
                                    form.inline method="post" action={ "/dashboard/webhooks/" (endpoint.id) } {
                                        (csrf(session))
                                        button type="submit" name="do" value="rotate" aria-label={ (t.rotate_secret) " " (endpoint.url) } { (t.rotate_secret) }
                                        button.danger type="submit" name="do" value="delete" aria-label={ (t.delete) " " (endpoint.url) } { (t.delete) }
                                    }
                                }
                            }
                        }
                    }
                }
            } }
        }
        @if manages {
            form.card method="post" action="/dashboard/webhooks" {
                (csrf(session))
                h2 { (t.add_endpoint) }
                label for="endpoint-url" { (t.url) }
                input id="endpoint-url" name="url" type="url" required;
                label for="endpoint-description" { (t.description) }
                input id="endpoint-description" name="description" maxlength="500";
                button type="submit" { (t.add_endpoint) }
            }
        }
    }
}

/// One endpoint's deliveries, newest first, with "Resend" for a failed one.
pub fn endpoint(
    t: &Text,
    session: &Session,
    endpoint: &Endpoint,
    deliveries: &[EndpointDelivery],
    done: Option<&str>,
) -> Markup {
    let manages = session.role().may(Permission::ManageWebhooks);
    let action = format!("/dashboard/webhooks/{}", endpoint.id);
    html! {
        (notice(done, false))
        dl.fields {
            dt { (t.url) } dd { (endpoint.url) }
            dt { (t.state) } dd { (endpoint.state) }
            @if let Some(d) = &endpoint.description { dt { (t.description) } dd { (d) } }
        }
        @if manages {
            form method="post" action=(action) {
                (csrf(session))
                button type="submit" name="do" value="test" { (t.send_test_event) }
            }
        }
        h2 { (t.deliveries) }
        @if deliveries.is_empty() { p { (t.none) } } @else {
            div.table { table {
                thead { tr {
                    th scope="col" { (t.event) } th scope="col" { (t.state) } th scope="col" { (t.attempts) }
                    th scope="col" { (t.response) } th scope="col" { (t.created) }
                    @if manages { th scope="col" { span.visually-hidden { (t.resend) } } }
                } }
                tbody {
                    @for delivery in deliveries {
                        tr {
                            td { code { (delivery.event_type) } br; code.hint { (delivery.event_id) } }
                            td { (delivery.state) }
                            td.number { (delivery.attempts) }
                            td { @if let Some(status) = delivery.last_status { (status) } @else { (delivery.last_error.as_deref().unwrap_or("—")) } }
                            td { (when(delivery.created_at)) }
                            @if manages {
                                td {
                                    @if delivery.state == "failed" {
                                        form method="post" action=(action) {
                                            (csrf(session))
                                            input type="hidden" name="event" value=(delivery.event_id);
                                            button type="submit" name="do" value="resend" aria-label={ (t.resend) " " (delivery.event_id) } { (t.resend) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            } }
        }
    }
}

/// The export's form: a GET, so the download is a plain link the browser saves.
pub fn export(t: &Text, from: &str, to: &str) -> Markup {
    html! {
        form.card method="get" action="/dashboard/export.csv" {
            label for="what" { (t.what) }
            select id="what" name="what" {
                option value="payments" { (t.payments) }
                option value="ledger" { (t.ledger_postings) }
            }
            label for="from" { (t.from) }
            input id="from" name="from" type="date" required value=(from);
            label for="to" { (t.to) }
            input id="to" name="to" type="date" required value=(to);
            p.hint { (t.export_hint) }
            button type="submit" { (t.download_csv) }
        }
    }
}

/// A refund; while `created` and paid by the merchant's signature, the step that signs it in the
/// browser (`dashboard.js`: the wallet by EIP-6963, the authorization from the server, the
/// signature posted back with the session's CSRF token).
pub fn refund(
    t: &Text,
    session: &Session,
    refund: &Refund,
    units: &(Option<String>, Option<u8>),
) -> Markup {
    let (symbol, decimals) = units;
    let amount = match decimals {
        Some(d) => format!(
            "{} {}",
            in_units(&refund.amount, *d),
            symbol.as_deref().unwrap_or("")
        ),
        None => format!("{} (base units)", refund.amount),
    };
    let signable = refund.state == RefundState::Created
        && refund.payment_method == RefundMethod::Authorization
        && session.role().may(Permission::Refund);
    let chain_id = Chain::id_of(&refund.chain).unwrap_or(0);
    let words = serde_json::json!({
        "no_wallet": t.no_wallet, "wrong_account": t.wrong_account, "signing": t.signing,
        "refused": t.refused, "rejected": t.rejected, "failed": t.failed,
    });
    html! {
        dl.fields {
            dt { (t.id) } dd { code { (refund.id) } }
            dt { (t.state) } dd { span.state { (refund.state.as_str()) } }
            dt { (t.amount) } dd { (amount) }
            dt { (t.payment) } dd { a href={ "/dashboard/payments/" (refund.payment_intent) } { code { (refund.payment_intent) } } }
            dt { (t.refund_to) } dd { code { (refund.payer) } }
            dt { (t.chain) } dd { (refund.chain) }
            @if let Some(reason) = refund.failure_reason.as_deref().or(refund.pending_reason.as_deref()) {
                dt { (t.reason) } dd { (reason) }
            }
            @if let Some(s) = &refund.settlement {
                dt { (t.transaction) } dd { code { (s.0.transaction_hash) } }
            }
            dt { (t.created) } dd { (when(refund.created_at)) }
            dt { (t.expires) } dd { (when(refund.expires_at)) }
        }
        @if signable {
            section.card id="refund-signing"
                data-authorization={ "/dashboard/refunds/" (refund.id) "/authorization" }
                data-confirm={ "/dashboard/refunds/" (refund.id) "/confirm" }
                data-signer=(refund.merchant) data-chain-id=(chain_id)
                data-csrf=(session.csrf_token) data-words=(words.to_string())
                aria-labelledby="sign-heading" {
                h2 id="sign-heading" { (t.sign_refund) }
                p.hint { (t.refund_sign_hint) }
                button id="sign-refund" type="button" { (t.sign_refund) }
                p id="refund-status" role="status" {}
            }
            script src="/dashboard/assets/dashboard.js" defer {}
        }
    }
}
