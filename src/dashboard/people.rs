//! The people behind a merchant (`docs/dashboard.md`, "People and roles"): their roles, their
//! one-time links to set a password, their passwords (argon2id) and the team an owner manages.
//! Owner of `dashboard_users` and `dashboard_password_links`.

use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::audit::{self, Who};

/// What a person may do, each role everything the one before may and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads every page.
    Viewer,
    /// Also manages webhook endpoints and API keys.
    Developer,
    /// Also refunds, cancels, and manages the team and the merchant's settings.
    Owner,
}

/// What a request asks to do; the server checks it for every action, whatever a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Read,
    ManageApiKeys,
    ManageWebhooks,
    Cancel,
    Refund,
    ManageTeam,
    ManageSettings,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Owner, Role::Developer, Role::Viewer];

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "owner" => Some(Self::Owner),
            "developer" => Some(Self::Developer),
            "viewer" => Some(Self::Viewer),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Developer => "developer",
            Self::Viewer => "viewer",
        }
    }

    /// The one place roles meet permissions.
    pub fn may(self, permission: Permission) -> bool {
        let needs = match permission {
            Permission::Read => Role::Viewer,
            Permission::ManageApiKeys | Permission::ManageWebhooks => Role::Developer,
            Permission::Cancel
            | Permission::Refund
            | Permission::ManageTeam
            | Permission::ManageSettings => Role::Owner,
        };
        self >= needs
    }
}

/// An email address as a sign-in name: trimmed, lower-cased, one `@` with something on each
/// side, no spaces or control characters, at most 254 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        let email = raw.trim().to_lowercase();
        let well_formed = email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.is_empty() && !domain.contains('@')
        }) && !email.chars().any(|c| c.is_whitespace() || c.is_control());
        if !well_formed || email.chars().count() > 254 {
            return Err("must be an email address");
        }
        Ok(Self(email))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A password as set: at least 12 characters and at most 1024 (argon2 reads it all).
pub struct NewPassword(String);

impl NewPassword {
    pub const MIN_CHARS: usize = 12;

    pub fn parse(raw: String) -> Result<Self, &'static str> {
        let chars = raw.chars().count();
        if chars < Self::MIN_CHARS {
            return Err("must be at least 12 characters");
        }
        if raw.len() > 1024 {
            return Err("must be at most 1024 bytes");
        }
        Ok(Self(raw))
    }
}

/// A person as the team page and the session see them.
#[derive(Debug, Clone)]
pub struct User {
    pub id: String,
    pub merchant_id: String,
    pub email: String,
    pub role: Role,
    pub created_at: OffsetDateTime,
    /// Whether a password was set (else an invitation is still open).
    pub active: bool,
}

struct UserRow {
    id: String,
    merchant_id: String,
    email: String,
    role: String,
    created_at: OffsetDateTime,
    active: Option<bool>,
}

impl From<UserRow> for User {
    fn from(row: UserRow) -> Self {
        Self::signed_up(
            row.id,
            row.merchant_id,
            row.email,
            &row.role,
            row.created_at,
            row.active.unwrap_or(false),
        )
    }
}

impl User {
    /// A person as read from `dashboard_users`: its role as stored.
    pub fn signed_up(
        id: String,
        merchant_id: String,
        email: String,
        role: &str,
        created_at: OffsetDateTime,
        active: bool,
    ) -> Self {
        Self {
            id,
            merchant_id,
            email,
            // The table's CHECK allows only the three.
            role: Role::parse(role).unwrap_or(Role::Viewer),
            created_at,
            active,
        }
    }
}

/// How long a link to set a password works.
pub const LINK_VALID_FOR: time::Duration = time::Duration::hours(24);

fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error("a person with that email already has an account")]
    EmailTaken,
    #[error("no such person in this team")]
    NotFound,
    #[error("the last owner cannot be removed or lose the owner role")]
    LastOwner,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Adds a person to the merchant's team and returns the token of their one-time link to set a
/// password (`<base>/dashboard/password?token=<token>`). Only the token's hash is stored.
pub async fn invite(
    conn: &mut PgConnection,
    merchant: &str,
    email: &Email,
    role: Role,
    who: &Who,
) -> Result<(User, String), TeamError> {
    let id = crate::ids::generate("usr_");
    let row = sqlx::query_as!(
        UserRow,
        r#"INSERT INTO dashboard_users (id, merchant_id, email, role) VALUES ($1, $2, $3, $4)
           ON CONFLICT (email) DO NOTHING
           RETURNING id, merchant_id, email, role, created_at, false AS "active""#,
        id,
        merchant,
        email.as_str(),
        role.as_str(),
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(TeamError::EmailTaken)?;
    let token = new_link(conn, &row.id).await?;
    audit::record(conn, merchant, who, "user.invite", Some(email.as_str())).await?;
    Ok((row.into(), token))
}

async fn new_link(conn: &mut PgConnection, user_id: &str) -> Result<String, sqlx::Error> {
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = hex::encode(secret);
    sqlx::query!(
        "INSERT INTO dashboard_password_links (token_sha256, user_id, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))",
        token_hash(&token),
        user_id,
        LINK_VALID_FOR.as_seconds_f64(),
    )
    .execute(conn)
    .await?;
    Ok(token)
}

/// The person a link is for, if it is unused and not expired.
pub async fn link_user(conn: &mut PgConnection, token: &str) -> Result<Option<User>, sqlx::Error> {
    Ok(sqlx::query_as!(
        UserRow,
        r#"SELECT u.id, u.merchant_id, u.email, u.role, u.created_at,
                  (u.password_hash IS NOT NULL) AS "active"
             FROM dashboard_password_links l JOIN dashboard_users u ON u.id = l.user_id
            WHERE l.token_sha256 = $1 AND l.used_at IS NULL AND l.expires_at > now()"#,
        token_hash(token),
    )
    .fetch_optional(conn)
    .await?
    .map(User::from))
}

/// Sets the password of the link's person and spends the link, in one statement each under one
/// transaction: a link works once even when two tabs submit it at the same time. Every session of
/// the person ends (a new password is a new start). `None` when the link is unknown, used or
/// expired.
pub async fn set_password(
    conn: &mut PgConnection,
    token: &str,
    password: NewPassword,
    address: Option<String>,
) -> Result<Option<User>, sqlx::Error> {
    let hash = hash_password(&password.0);
    let spent = sqlx::query_scalar!(
        "UPDATE dashboard_password_links SET used_at = now()
          WHERE token_sha256 = $1 AND used_at IS NULL AND expires_at > now()
         RETURNING user_id",
        token_hash(token),
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(user_id) = spent else {
        return Ok(None);
    };
    let user: User = sqlx::query_as!(
        UserRow,
        r#"UPDATE dashboard_users SET password_hash = $2 WHERE id = $1
           RETURNING id, merchant_id, email, role, created_at, true AS "active""#,
        user_id,
        hash,
    )
    .fetch_one(&mut *conn)
    .await?
    .into();
    super::sessions::end_all(conn, &user.id).await?;
    let who = Who::user(&user.email, address);
    audit::record(conn, &user.merchant_id, &who, "user.set_password", None).await?;
    Ok(Some(user))
}

fn hash_password(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2id with default parameters hashes any password under 4 GiB")
        .to_string()
}

/// A hash no password matches, verified against when the email is unknown, so that an unknown
/// account takes as long to refuse as a wrong password.
fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_password("no password is this one: it is never stored"))
}

/// The person whose email and password these are; `None` for a wrong password, an unknown email
/// or a person who never set one, after the same work in each case.
pub async fn check_password(
    conn: &mut PgConnection,
    email: &Email,
    password: &str,
) -> Result<Option<User>, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT id, merchant_id, email, role, created_at, password_hash
           FROM dashboard_users WHERE email = $1",
        email.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    let stored = row
        .as_ref()
        .and_then(|r| r.password_hash.clone())
        .unwrap_or_else(|| decoy_hash().to_owned());
    let password = password.to_owned();
    // argon2 takes tens of milliseconds of CPU: off the async workers.
    let matches = tokio::task::spawn_blocking(move || {
        PasswordHash::new(&stored).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false);
    Ok(match row {
        Some(r) if matches && r.password_hash.is_some() => Some(User::signed_up(
            r.id,
            r.merchant_id,
            r.email,
            &r.role,
            r.created_at,
            true,
        )),
        _ => None,
    })
}

/// The merchant's team, oldest first.
pub async fn team(conn: &mut PgConnection, merchant: &str) -> Result<Vec<User>, sqlx::Error> {
    Ok(sqlx::query_as!(
        UserRow,
        r#"SELECT id, merchant_id, email, role, created_at,
                  (password_hash IS NOT NULL) AS "active"
             FROM dashboard_users WHERE merchant_id = $1 ORDER BY created_at, id"#,
        merchant,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(User::from)
    .collect())
}

/// Changes a person's role, or removes them (`role` `None`), unless that leaves the merchant
/// without an owner. The merchant's owners are locked first, so two owners demoting each other at
/// once cannot both succeed.
pub async fn change(
    conn: &mut PgConnection,
    merchant: &str,
    user_id: &str,
    role: Option<Role>,
    who: &Who,
) -> Result<(), TeamError> {
    let owners = sqlx::query_scalar!(
        "SELECT id FROM dashboard_users WHERE merchant_id = $1 AND role = 'owner' FOR UPDATE",
        merchant,
    )
    .fetch_all(&mut *conn)
    .await?;
    let email = sqlx::query_scalar!(
        "SELECT email FROM dashboard_users WHERE merchant_id = $1 AND id = $2 FOR UPDATE",
        merchant,
        user_id,
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(TeamError::NotFound)?;
    let stays_owner = role == Some(Role::Owner);
    if !stays_owner && owners.len() == 1 && owners[0] == user_id {
        return Err(TeamError::LastOwner);
    }
    match role {
        Some(role) => {
            sqlx::query!(
                "UPDATE dashboard_users SET role = $3 WHERE merchant_id = $1 AND id = $2",
                merchant,
                user_id,
                role.as_str(),
            )
            .execute(&mut *conn)
            .await?;
            let action = format!("user.role.{}", role.as_str());
            audit::record(conn, merchant, who, &action, Some(&email)).await?;
        }
        None => {
            // Its sessions and links go with it (ON DELETE CASCADE).
            sqlx::query!(
                "DELETE FROM dashboard_users WHERE merchant_id = $1 AND id = $2",
                merchant,
                user_id,
            )
            .execute(&mut *conn)
            .await?;
            audit::record(conn, merchant, who, "user.remove", Some(&email)).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_may_what_the_one_below_may_and_more() {
        use Permission::*;
        let all = [
            Read,
            ManageApiKeys,
            ManageWebhooks,
            Cancel,
            Refund,
            ManageTeam,
            ManageSettings,
        ];
        let allowed = |role: Role| all.iter().filter(|p| role.may(**p)).count();
        assert_eq!(allowed(Role::Viewer), 1);
        assert_eq!(allowed(Role::Developer), 3);
        assert_eq!(allowed(Role::Owner), all.len());
        assert!(!Role::Developer.may(Refund));
        assert!(Role::Developer.may(ManageWebhooks));
    }

    #[test]
    fn emails_are_trimmed_and_lower_cased() {
        assert_eq!(
            Email::parse(" Ana@Shop.Example ").unwrap().as_str(),
            "ana@shop.example"
        );
        for bad in ["", "ana", "@shop", "ana@", "a b@shop", "a@b@c"] {
            assert!(Email::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_have_at_least_twelve_characters() {
        assert!(NewPassword::parse("short".to_owned()).is_err());
        assert!(NewPassword::parse("長い合言葉は十二文字以上です".to_owned()).is_ok());
        assert!(NewPassword::parse("x".repeat(12)).is_ok());
    }
}
