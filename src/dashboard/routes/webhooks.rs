//! Webhook endpoints and their deliveries: add, rotate, delete, resend, test.

use axum::{
    extract::{Path, RawQuery, State},
    http::StatusCode,
    response::Response,
};
use serde::Deserialize;

use super::{PAGE, done};
use crate::dashboard::{
    pages::{self, Section},
    people::Permission,
    web::{Acting, PageError, Signed, see_other},
};
use crate::{
    db::Pool,
    events,
    webhooks::{self, WebhookState, endpoints::Endpoint},
};

pub(super) async fn webhooks_page(
    pool: &Pool,
    signed: &Signed,
    created: Option<&Endpoint>,
) -> Result<Response, PageError> {
    let endpoints =
        webhooks::endpoints::endpoints_of(&mut *pool.acquire().await?, &signed.merchant()).await?;
    let t = signed.text();
    let content = pages::webhooks(t, &signed.session, &endpoints, created);
    Ok(signed.page(StatusCode::OK, t.webhooks, Section::Webhooks, content))
}

pub(super) async fn webhooks(
    State(pool): State<Pool>,
    signed: Signed,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    webhooks_page(&pool, &signed, None).await
}

#[derive(Deserialize)]
pub(super) struct EndpointForm {
    url: String,
    description: Option<String>,
}

/// `POST /v1/webhook_endpoints`'s checks and insert; the secret is shown in this answer only.
pub(super) async fn add_endpoint(
    State(pool): State<Pool>,
    State(state): State<WebhookState>,
    Acting { signed, form }: Acting<EndpointForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageWebhooks)?;
    let merchant = signed.merchant();
    let request = webhooks::endpoints::CreateEndpoint {
        url: form.url,
        event_types: None,
        description: form.description.filter(|d| !d.trim().is_empty()),
    };
    let mut tx = signed.change(&pool).await?;
    let created = webhooks::endpoints::add(&mut tx, &state.settings, &merchant, request).await?;
    tx.done("webhook_endpoint.create", Some(&created.id))
        .await?;
    webhooks_page(&pool, &signed, Some(&created)).await
}

pub(super) async fn endpoint(
    State(pool): State<Pool>,
    signed: Signed,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let merchant = signed.merchant();
    let mut conn = pool.acquire().await?;
    let endpoint = webhooks::endpoints::endpoint_of(&mut conn, &merchant, &id)
        .await?
        .ok_or(PageError::NotFound)?;
    let deliveries =
        webhooks::delivery::of_endpoint(&mut conn, merchant.as_str(), &endpoint.id, PAGE).await?;
    let t = signed.text();
    let done = done(query.as_deref()).and_then(|d| match d.as_str() {
        "resent" => Some(t.resent),
        "test" => Some(t.test_sent),
        _ => None,
    });
    let content = pages::endpoint(t, &signed.session, &endpoint, &deliveries, done);
    Ok(signed.page(StatusCode::OK, &endpoint.url, Section::Webhooks, content))
}

#[derive(Deserialize)]
pub(super) struct EndpointChange {
    #[serde(rename = "do")]
    what: String,
    event: Option<String>,
}

/// Rotate an endpoint's secret, delete it, resend a failed delivery to it, or send it a test
/// event; each with its audit line in its transaction.
pub(super) async fn change_endpoint(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<EndpointChange>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageWebhooks)?;
    let merchant = signed.merchant();
    let mut tx = signed.change(&pool).await?;
    let (action, back) = match form.what.as_str() {
        "rotate" => {
            let rotated = webhooks::endpoints::rotate(&mut tx, &merchant, &id)
                .await?
                .ok_or(PageError::NotFound)?;
            tx.done("webhook_endpoint.rotate_secret", Some(&id)).await?;
            return webhooks_page(&pool, &signed, Some(&rotated)).await;
        }
        "delete" => {
            if !webhooks::endpoints::delete(&mut tx, &merchant, &id).await? {
                return Err(PageError::NotFound);
            }
            ("webhook_endpoint.delete", "/dashboard/webhooks".to_owned())
        }
        "resend" => {
            let event = form
                .event
                .ok_or_else(|| PageError::BadRequest("event: missing".to_owned()))?;
            if !webhooks::delivery::resend(&mut tx, merchant.as_str(), &id, &event).await? {
                return Err(PageError::NotFound);
            }
            (
                "webhook_delivery.resend",
                format!("/dashboard/webhooks/{id}?done=resent"),
            )
        }
        "test" => {
            let known = webhooks::endpoints::endpoints_of(&mut tx, &merchant).await?;
            if !known.iter().any(|e| e.id == id) {
                return Err(PageError::NotFound);
            }
            events::store::record_test(&mut tx, merchant.as_str(), &id).await?;
            (
                "webhook_endpoint.test",
                format!("/dashboard/webhooks/{id}?done=test"),
            )
        }
        _ => {
            return Err(PageError::BadRequest(
                "do: must be rotate, delete, resend or test".to_owned(),
            ));
        }
    };
    tx.done(action, Some(&id)).await?;
    Ok(see_other(&back))
}
