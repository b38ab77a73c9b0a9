//! The team: invite, change a role, remove.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use serde::Deserialize;

use crate::dashboard::{
    pages::{self, Section},
    people::{self, Email, Permission, Role, TeamError},
    web::{Acting, PageError, Signed, see_other},
};
use crate::{
    db::{OpenTransaction, Pool},
    intents::routes::PublicBaseUrl,
};

pub(super) async fn team_page(
    pool: &Pool,
    signed: &Signed,
    status: StatusCode,
    invited: Option<&str>,
    problem: Option<&str>,
) -> Result<Response, PageError> {
    let people = people::team(&mut *pool.acquire().await?, signed.session.merchant()).await?;
    let t = signed.text();
    let content = pages::team(t, &signed.session, &people, invited, problem);
    Ok(signed.page(status, t.team, Section::Team, content))
}

pub(super) async fn team(State(pool): State<Pool>, signed: Signed) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    team_page(&pool, &signed, StatusCode::OK, None, None).await
}

#[derive(Deserialize)]
pub(super) struct InviteForm {
    email: String,
    role: String,
}

/// The CLI's `users create`: a person and their one-time link, shown once.
pub(super) async fn invite(
    State(pool): State<Pool>,
    State(base): State<PublicBaseUrl>,
    Acting { signed, form }: Acting<InviteForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageTeam)?;
    let email =
        Email::parse(&form.email).map_err(|why| PageError::BadRequest(format!("email: {why}")))?;
    let role = Role::parse(&form.role)
        .ok_or_else(|| PageError::BadRequest("role: must be owner, developer or viewer".into()))?;
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    let invited = people::invite(
        &mut tx,
        signed.session.merchant(),
        &email,
        role,
        &signed.who(),
    )
    .await;
    match invited {
        Ok((_, token)) => {
            tx.commit().await?;
            let link = password_link(&base, &token);
            team_page(&pool, &signed, StatusCode::OK, Some(&link), None).await
        }
        Err(e) => {
            drop(tx);
            team_refusal(&pool, &signed, e).await
        }
    }
}

/// The link a person sets their password with.
pub fn password_link(base: &PublicBaseUrl, token: &str) -> String {
    format!("{}/dashboard/password?token={token}", base.as_str())
}

pub(super) async fn team_refusal(
    pool: &Pool,
    signed: &Signed,
    e: TeamError,
) -> Result<Response, PageError> {
    let message = e.to_string();
    match e {
        TeamError::Database(e) => Err(e.into()),
        TeamError::NotFound => Err(PageError::NotFound),
        TeamError::EmailTaken | TeamError::LastOwner => {
            team_page(pool, signed, StatusCode::CONFLICT, None, Some(&message)).await
        }
    }
}

#[derive(Deserialize)]
pub(super) struct MemberForm {
    role: Option<String>,
    #[serde(rename = "do")]
    what: String,
}

pub(super) async fn change_member(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    Acting { signed, form }: Acting<MemberForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageTeam)?;
    let role = match form.what.as_str() {
        "remove" => None,
        "change" => Some(form.role.as_deref().and_then(Role::parse).ok_or_else(|| {
            PageError::BadRequest("role: must be owner, developer or viewer".into())
        })?),
        _ => return Err(PageError::BadRequest("do: must be change or remove".into())),
    };
    let mut tx = OpenTransaction::begin_on_pool(&pool).await?;
    match people::change(&mut tx, signed.session.merchant(), &id, role, &signed.who()).await {
        Ok(()) => {
            tx.commit().await?;
            Ok(see_other("/dashboard/team"))
        }
        Err(e) => {
            drop(tx);
            team_refusal(&pool, &signed, e).await
        }
    }
}
