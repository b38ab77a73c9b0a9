//! The OpenAPI 3.1 description (`GET /openapi.json`), generated from the handlers' annotations.
//! What the generic layers do to every operation (bearer auth, the Idempotency-Key header on every
//! POST, their own error answers) is added here once, the way the layers apply it once.

use axum::Json;
use utoipa::{
    Modify, OpenApi,
    openapi::{
        Components, ContentBuilder, HeaderBuilder, ObjectBuilder, Ref, RefOr, ResponseBuilder,
        Type,
        path::{Operation, ParameterBuilder, ParameterIn},
        security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme},
    },
};

use crate::{
    checkout, events,
    http::health,
    idempotency, intents, ledger, merchants, telemetry,
    ways_to_pay::{authorization, refunds, x402},
    webhooks,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "payments-api",
        description = "Payment intents for stablecoin payments on EVM chains. One Idempotency-Key, one execution, one answer, byte for byte, for 24 hours.",
    ),
    paths(
        intents::routes::create,
        intents::routes::list,
        intents::routes::show,
        intents::routes::cancel,
        authorization::routes::authorization,
        authorization::routes::confirm,
        checkout::routes::document,
        checkout::routes::show,
        checkout::routes::authorization,
        checkout::routes::confirm,
        checkout::routes::events,
        x402::routes::supported,
        x402::routes::verify,
        x402::settle::settle,
        x402::routes::payment,
        merchants::show,
        merchants::update,
        refunds::routes::create,
        refunds::routes::list,
        refunds::routes::show,
        refunds::routes::authorization,
        refunds::routes::confirm,
        ledger::routes::balances,
        idempotency::routes::show,
        events::routes::list,
        events::routes::show,
        events::routes::deliveries,
        webhooks::endpoints::create,
        webhooks::endpoints::list,
        webhooks::endpoints::show,
        webhooks::endpoints::remove,
        webhooks::endpoints::rotate_secret,
        health::healthz,
        health::readyz,
        telemetry::metrics::render,
        openapi_json,
    ),
    components(schemas(crate::error::ErrorBody)),
    modifiers(&GenericLayers),
    tags(
        (name = "payment_intents", description = "Create, read, list and cancel payment intents"),
        (name = "settlement", description = "Pay an intent on chain with an EIP-3009 authorization"),
        (name = "checkout", description = "The page a payer opens from `checkout_url`, and its API: the bearer there is the intent's `client_secret`, which opens that intent's public view and confirm only"),
        (name = "x402", description = "payments-api as an x402 facilitator: `HTTPFacilitatorClient` with `url: <base>/x402` and the merchant's API key"),
        (name = "merchant", description = "The merchant's own settings"),
        (name = "refunds", description = "Pay a paid intent back, in whole or in part, by an authorization the merchant signs"),
        (name = "idempotency", description = "Reconciliation of Idempotency-Keys"),
        (name = "events", description = "What changed, kept 30 days, and its webhook deliveries"),
        (name = "webhooks", description = "Endpoints that receive every event, signed"),
        (name = "operations", description = "Probes, metrics and this document"),
    )
)]
pub struct ApiDoc;

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "This document")))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The document as committed in `openapi.json` (pretty JSON with a final newline).
pub fn document() -> String {
    let mut json = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    json.push('\n');
    json
}

/// The bare form of a key (`docs/api.md`, "Idempotency"): 1-255 visible ASCII characters, not starting with a quote
/// (a leading quote announces the RFC 8941 form, which the description explains).
pub const KEY_PATTERN: &str = "^[!#-~][!-~]{0,254}$";

struct GenericLayers;

impl Modify for GenericLayers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Components::new);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "client_secret",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The intent's `client_secret` (from its `checkout_url`'s fragment): opens that intent's checkout only",
                    ))
                    .build(),
            ),
        );

        for (path, item) in openapi.paths.paths.iter_mut() {
            // The facilitator's routes take the merchant's key too.
            let facilitator = path.starts_with("/x402/");
            if !path.starts_with("/v1/") && !facilitator {
                continue;
            }
            // A checkout page's bearer is its intent's client secret, not an API key.
            let scheme = if path.starts_with("/v1/checkout/") {
                "client_secret"
            } else {
                "bearer"
            };
            for operation in [&mut item.get, &mut item.post].into_iter().flatten() {
                operation.security =
                    Some(vec![SecurityRequirement::new(scheme, Vec::<String>::new())]);
                add_error(
                    operation,
                    "401",
                    "Missing or unknown credentials (`unauthorized`), with `WWW-Authenticate: Bearer`",
                );
                if scheme == "bearer" {
                    add_error(
                        operation,
                        "429",
                        "`rate_limited`: past the merchant's requests per second or requests at once; nothing was done, not even an idempotency record. Carries `Retry-After`, `RateLimit` and `RateLimit-Policy`",
                    );
                }
                add_error(
                    operation,
                    "500",
                    "`internal_error`; nothing internal is disclosed",
                );
                add_error(
                    operation,
                    "503",
                    "`unavailable`: the database is unreachable; nothing was committed. Carries `Retry-After`",
                );
            }
            // Of the facilitator's POSTs only settle passes the idempotency layer (key optional).
            let idempotent = !facilitator || path == "/x402/settle";
            if let Some(operation) = item.post.as_mut().filter(|_| idempotent) {
                idempotent_post(operation);
            }
        }
    }
}

/// What the idempotency layer adds to every POST (`docs/api.md`, "Idempotency").
fn idempotent_post(operation: &mut Operation) {
    let key = ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .description(Some(
            "Names this operation: the same key with the same request is executed once and always answered with the same stored response for 24 h. 1-255 visible ASCII characters, or an RFC 8941 string \"...\".",
        ))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String).pattern(Some(KEY_PATTERN))))
        .build();
    operation.parameters.get_or_insert_with(Vec::new).push(key);

    for (status, response) in operation.responses.responses.iter_mut() {
        if let RefOr::T(response) = response
            && (status.starts_with('2') || status.starts_with('4'))
        {
            response.headers.insert(
                "Idempotent-Replayed".to_owned(),
                HeaderBuilder::new()
                    .schema(ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["true"])))
                    .description(Some("Present, as `true`, when this is the stored answer of an earlier execution"))
                    .build(),
            );
        }
    }
    add_error(
        operation,
        "400",
        "`invalid_request` (stored and replayed), or the layer's own `idempotency_key_invalid` / `idempotency_key_missing` (not stored)",
    );
    add_error(
        operation,
        "409",
        "`idempotency_key_in_flight` (with `Retry-After`), `idempotency_key_lease_lost`, or `invalid_state_transition`",
    );
    add_error(
        operation,
        "408",
        "`request_timeout`: the body did not arrive within the request timeout",
    );
    add_error(operation, "413", "`payload_too_large`");
    add_error(
        operation,
        "422",
        "`idempotency_key_reused`: this key was used for a different request",
    );
}

fn add_error(operation: &mut Operation, status: &str, description: &str) {
    let body = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ErrorBody")))
        .build();
    let mut response = ResponseBuilder::new()
        .description(description)
        .content("application/json", body);
    if status == "429" {
        for (name, description) in [
            (
                "RateLimit-Policy",
                "The merchant's limits (draft-ietf-httpapi-ratelimit-headers): `\"rate\";q=<per second>;w=1` and `\"concurrency\";q=<at once>;qu=\"concurrent-requests\"`",
            ),
            (
                "RateLimit",
                "What is left of them: `\"rate\";r=<remaining>;t=<seconds>`, `\"concurrency\";r=<remaining>`",
            ),
        ] {
            response = response.header(
                name,
                HeaderBuilder::new()
                    .schema(ObjectBuilder::new().schema_type(Type::String))
                    .description(Some(description))
                    .build(),
            );
        }
    }
    if matches!(status, "409" | "429" | "503") {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1)),
                )
                .description(Some(
                    "Seconds to wait before retrying with the same Idempotency-Key",
                ))
                .build(),
        );
    }
    if status == "401" {
        response = response.header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .build(),
        );
    }
    operation
        .responses
        .responses
        .entry(status.to_owned())
        .or_insert_with(|| RefOr::T(response.build()));
}
