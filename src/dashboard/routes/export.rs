//! The export page and its CSV.

use axum::{
    extract::{RawQuery, State},
    http::{StatusCode, header},
    response::Response,
};
use serde::Deserialize;

use crate::dashboard::{
    export,
    pages::{self, Section},
    people::Permission,
    web::{PageError, Signed, with_headers},
};
use crate::db::Pool;

pub(super) async fn export_page(signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let today = time::OffsetDateTime::now_utc().date();
    let format = time::format_description::parse("[year]-[month]-[day]")
        .expect("a valid format description");
    let day = |d: time::Date| d.format(&format).unwrap_or_default();
    let t = signed.text();
    let content = pages::export(t, &day(today - time::Duration::days(30)), &day(today));
    Ok(signed.page(StatusCode::OK, t.export, Section::Export, content))
}

#[derive(Deserialize)]
pub(super) struct ExportParams {
    what: String,
    from: String,
    to: String,
}

pub(super) async fn export_csv(
    State(pool): State<Pool>,
    signed: Signed,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    let params = serde_urlencoded::from_str::<ExportParams>(query.as_deref().unwrap_or(""))
        .map_err(|e| PageError::BadRequest(e.to_string()))?;
    let kind = export::Kind::parse(&params.what)
        .ok_or_else(|| PageError::BadRequest("what: must be payments or ledger".to_owned()))?;
    let range = export::Range::parse(&params.from, &params.to).map_err(PageError::BadRequest)?;
    let file = format!("{}-{}-{}.csv", kind.as_str(), params.from, params.to);
    let body = export::body(pool, signed.merchant(), kind, range);
    let mut response = with_headers(Response::new(body), false);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        "text/csv; charset=utf-8".parse().expect("static"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        format!("attachment; filename=\"{file}\"")
            .parse()
            .map_err(|_| PageError::BadRequest("from, to: must be dates".to_owned()))?,
    );
    Ok(response)
}
