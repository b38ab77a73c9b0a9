//! The audit log.

use axum::{
    extract::{RawQuery, State},
    http::StatusCode,
    response::Response,
};
use serde::Deserialize;

use super::PAGE;
use crate::dashboard::{
    pages::{self, Section},
    people::Permission,
    web::{PageError, Signed},
};
use crate::{audit, db::Pool};

#[derive(Deserialize)]
pub(super) struct AuditParams {
    before: Option<i64>,
}

pub(super) async fn audit_log(
    State(pool): State<Pool>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let params = serde_urlencoded::from_str::<AuditParams>(query.as_deref().unwrap_or(""))
        .map_err(|e| PageError::BadRequest(e.to_string()))?;
    let mut lines = audit::list(
        &mut *pool.acquire().await?,
        signed.session.merchant(),
        params.before,
        PAGE + 1,
    )
    .await?;
    let next = if lines.len() as i64 > PAGE {
        lines.truncate(PAGE as usize);
        lines.last().map(|l| l.id)
    } else {
        None
    };
    let t = signed.text();
    let content = pages::audit_log(t, &lines, next);
    Ok(signed.page(StatusCode::OK, t.audit_log, Section::AuditLog, content))
}
