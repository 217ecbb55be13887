//! Signing in from a browser, where auth is required: the admin token or a console reader's
//! token is posted once and kept in a cookie for `/ui` only (`HttpOnly`, `SameSite=Strict`,
//! `Secure` over TLS), which the admin access reads as the bearer token on the console's
//! pages. A refused token is not repeated in the answer.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::html::{self, Section};
use super::{html_page, Console};
use crate::receive::auth::CONSOLE_COOKIE;

/// How long a sign-in lasts.
const SIGN_IN_SECONDS: u32 = 12 * 3600;

/// The posted form.
#[derive(Debug, Default, Deserialize)]
pub struct LoginForm {
    token: Option<String>,
}

const FORM: &str = "<form method=\"post\" action=\"/ui/login\">\
    <label for=\"token\">Admin token, or a console reader's token</label> \
    <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" size=\"50\"> \
    <button type=\"submit\">Sign in</button></form>\
    <p class=\"muted\">Kept in a cookie for this console's pages only, for 12 hours.</p>\
    <form method=\"post\" action=\"/ui/logout\"><button type=\"submit\">Sign out</button></form>";

/// `GET /ui/login`.
pub async fn form(State(console): State<Console>) -> Response {
    let needed = console.login.as_ref().is_some_and(|l| {
        l.access
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .required()
    });
    if !needed {
        return html_page(
            StatusCode::OK,
            Section::Requests,
            "Sign in",
            "<p>This console needs no sign-in: <a href=\"/ui/\">go to the requests</a>.</p>",
        );
    }
    html_page(StatusCode::OK, Section::Requests, "Sign in", FORM)
}

/// `POST /ui/login`: a known token sets the cookie and goes to the requests.
pub async fn sign_in(State(console): State<Console>, Form(f): Form<LoginForm>) -> Response {
    let token = f.token.as_deref().map(str::trim).unwrap_or("");
    let Some(login) = &console.login else {
        return Redirect::to("/ui/").into_response();
    };
    let known = !token.is_empty()
        && login
            .access
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .grant_of(token.as_bytes())
            .is_some();
    if !known {
        let body = format!(
            "<p class=\"bad\" role=\"alert\">That token is not one toolwatch knows.</p>{FORM}"
        );
        return html_page(
            StatusCode::UNAUTHORIZED,
            Section::Requests,
            "Sign in",
            &body,
        );
    }
    let secure = if login.tls { "; Secure" } else { "" };
    let cookie = format!(
        "{CONSOLE_COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={SIGN_IN_SECONDS}{secure}",
        html::url_part(token)
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/ui/".into()),
        ],
    )
        .into_response()
}

/// `POST /ui/logout`: the cookie is cleared.
pub async fn sign_out() -> Response {
    let cookie = format!("{CONSOLE_COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/ui/login".to_string()),
        ],
    )
        .into_response()
}
