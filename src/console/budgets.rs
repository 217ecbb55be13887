//! The budgets page: current usage against limits per tenant, principal and request, as
//! `GET /v1/budgets` reports it. Live state of the daemon's budget stage: a console over an
//! archive alone has none (the archive's `alarms` table holds what was raised).

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::html::{self, esc, Section};
use super::{field, html_page, Reader};

/// `?tenant=T`: one tenant, with every request it has open.
#[derive(Debug, Default, Deserialize)]
pub struct BudgetFilter {
    tenant: Option<String>,
}

/// `GET /ui/budgets`.
pub async fn page(Reader(console): Reader, Query(f): Query<BudgetFilter>) -> Response {
    let title = "Budgets";
    let Some(evaluator) = console.budgets.clone() else {
        return html_page(
            StatusCode::OK,
            Section::Budgets,
            title,
            "<p>Budget usage is the live state of a running daemon; this console reads an \
             archive alone. The alarms it raised are on the <a href=\"/ui/alarms\">Alarms</a> \
             page.</p>",
        );
    };
    let asked = field(&f.tenant).map(str::to_string);
    // A scoped console asks for each of its tenants; another tenant is not shown at all.
    let tenants: Vec<Option<String>> = match (console.scope.tenants(), &asked) {
        (Some(scope), Some(t)) if scope.contains(t) => vec![Some(t.clone())],
        (Some(_), Some(_)) => Vec::new(),
        (Some(scope), None) => scope.iter().cloned().map(Some).collect(),
        (None, t) => vec![t.clone()],
    };
    let Some(reports) = crate::admin::budget_reports(evaluator, tenants).await else {
        return html_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            Section::Budgets,
            title,
            "<p>The budget state could not be read.</p>",
        );
    };
    let mut body = format!(
        "<form class=\"filters\" method=\"get\" action=\"/ui/budgets\">\
         <label>Tenant<input name=\"tenant\" value=\"{}\"></label>\
         <button type=\"submit\">Show</button></form>\
         <p class=\"muted\">Without a tenant: each tenant's windows and the requests with an \
         active alarm. With one: every request it has open.</p>",
        esc(asked.as_deref().unwrap_or(""))
    );
    let mut any = false;
    for r in &reports {
        for t in r
            .get("tenants")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            any = true;
            body.push_str(&tenant_table(t));
        }
    }
    if !any {
        body.push_str("<p>No usage yet.</p>");
    }
    html_page(StatusCode::OK, Section::Budgets, title, &body)
}

fn tenant_table(t: &Value) -> String {
    let name = t.get("tenant").and_then(Value::as_str).unwrap_or_default();
    let rows: Vec<Vec<String>> = t
        .get("usage")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|u| {
            let s = |k: &str| u.get(k).and_then(Value::as_str).unwrap_or_default();
            let f = |k: &str| u.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let level = s("level");
            let class = match level {
                "limit" => " class=\"bad\"",
                "warning" => " class=\"warn\"",
                _ => "",
            };
            let scope_id = if s("scope") == "request" {
                format!(
                    "<a href=\"{}\">{}</a>",
                    esc(&html::request_href(name, s("id"))),
                    esc(s("id"))
                )
            } else {
                esc(s("id"))
            };
            vec![
                format!("{} {scope_id}", esc(s("scope"))),
                esc(s("budget")),
                format!("{}", f("usage")),
                format!("{}", f("warning_at")),
                format!("{}", f("limit")),
                format!("<span{class}>{}</span>", esc(level)),
            ]
        })
        .collect();
    let mut out = format!("<h2>Tenant {}</h2>", esc(name));
    if rows.is_empty() {
        out.push_str("<p>No usage yet.</p>");
    } else {
        out.push_str(&html::table(
            &format!("Usage against limits, tenant {name}"),
            &["Scope", "Budget", "Usage", "Warning at", "Limit", "Alarm"],
            &rows,
        ));
    }
    out
}
