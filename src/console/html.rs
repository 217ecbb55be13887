//! Writing the console's pages: escaping, the page frame, and the small formats every page
//! shares (times, durations, tokens, money). Every value from the archive passes through
//! [`esc`] (text and attributes) or [`url_part`] (a link's path segment or query value).

use std::fmt::Write as _;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The console's style sheet, served at `/ui/style.css` (no asset comes from elsewhere).
pub const STYLE: &str = include_str!("style.css");

/// Characters a path segment or query value keeps as they are; everything else is escaped.
const URL_PART: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` safe inside HTML text and double-quoted attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as one path segment or query value of a link.
pub fn url_part(text: &str) -> String {
    utf8_percent_encode(text, URL_PART).to_string()
}

/// The link to one request's page.
pub fn request_href(tenant: &str, request_id: &str) -> String {
    format!("/ui/requests/{}/{}", url_part(tenant), url_part(request_id))
}

/// Which section of the console a page belongs to (marked in the navigation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Requests and one request.
    Requests,
    /// Findings.
    Findings,
    /// Alarms.
    Alarms,
    /// Budgets.
    Budgets,
    /// Search.
    Search,
}

const SECTIONS: &[(Section, &str, &str)] = &[
    (Section::Requests, "/ui/", "Requests"),
    (Section::Findings, "/ui/findings", "Findings"),
    (Section::Alarms, "/ui/alarms", "Alarms"),
    (Section::Budgets, "/ui/budgets", "Budgets"),
];

/// A whole page: the frame (navigation, search form) around `body`, which is HTML already.
pub fn page(section: Section, title: &str, body: &str) -> String {
    let mut nav = String::new();
    for (s, href, label) in SECTIONS {
        let current = if *s == section {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{href}\"{current}>{label}</a>");
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · toolwatch</title><link rel=\"stylesheet\" href=\"/ui/style.css\"></head>\
         <body><a class=\"skip\" href=\"#main\">Skip to content</a>\
         <header><span class=\"brand\">toolwatch</span><nav aria-label=\"Console\">{nav}</nav>\
         <form class=\"search\" method=\"post\" action=\"/ui/search\" role=\"search\">\
         <label for=\"q\">Search</label>\
         <input id=\"q\" name=\"q\" type=\"search\" autocomplete=\"off\" \
         placeholder=\"request id, trace id, span id or idempotency key\">\
         <button type=\"submit\">Find</button></form>\
         <a class=\"account\" href=\"/ui/login\">Sign in or out</a></header>\
         <main id=\"main\" tabindex=\"-1\"><h1>{title}</h1>\n{body}</main></body></html>\n",
        title = esc(title),
    )
}

/// `ns` since the epoch as `YYYY-MM-DD HH:MM:SS.mmm` UTC.
pub fn time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000) as u32;
    match chrono::DateTime::from_timestamp(secs, nanos) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        None => ns.to_string(),
    }
}

/// The UTC day (`YYYY-MM-DD`, the archive's `date` partition) of `ns` since the epoch.
pub fn day(ns: i64) -> String {
    let t = time(ns);
    t.get(..10).unwrap_or(&t).to_string()
}

/// A duration in the unit that reads best: `840 µs`, `12.4 ms`, `3.20 s`, `11 min 5 s`.
pub fn duration(ns: i64) -> String {
    let ns = ns.max(0);
    if ns < 1_000_000 {
        format!("{} µs", ns / 1_000)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if ns < 60_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        let s = ns / 1_000_000_000;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// A count with thousands separated: `12,345`.
pub fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// US dollars to the cent, or to four places below a cent: `$0.0042`, `$1.25`.
pub fn usd(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.01 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

/// A table: `head` names the columns, each row's cells are HTML already.
pub fn table(caption: &str, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("<table><caption>{}</caption><thead><tr>", esc(caption));
    for h in head {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{c}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn link_parts_are_percent_encoded() {
        assert_eq!(url_part("req 7/../é?&#"), "req%207%2F..%2F%C3%A9%3F%26%23");
        assert_eq!(
            request_href("tenant-0", "req-3-00000004"),
            "/ui/requests/tenant-0/req-3-00000004"
        );
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(-1000), "-1,000");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(0.0042), "$0.0042");
        assert_eq!(usd(1.254), "$1.25");
        assert_eq!(duration(840_000), "840 µs");
        assert_eq!(duration(12_400_000), "12.4 ms");
        assert_eq!(duration(3_200_000_000), "3.20 s");
        assert_eq!(duration(665_000_000_000), "11 min 5 s");
        assert_eq!(time(1_767_225_600_123_000_000), "2026-01-01 00:00:00.123");
        assert_eq!(day(1_767_225_600_123_000_000), "2026-01-01");
    }

    #[test]
    fn a_page_marks_its_section_and_escapes_its_title() {
        let p = page(Section::Findings, "a <b>", "<p>x</p>");
        assert!(p.contains("<title>a &lt;b&gt; · toolwatch</title>"));
        assert!(p.contains("<a href=\"/ui/findings\" aria-current=\"page\">Findings</a>"));
        assert!(p.contains("<a href=\"/ui/\">Requests</a>"));
        assert!(p.contains("<h1>a &lt;b&gt;</h1>\n<p>x</p>"));
    }
}
