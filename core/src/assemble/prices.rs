//! What model calls cost: a configured price table per provider and model.
//!
//! toolwatch computes the cost of a request itself, from token counts and this table, rather
//! than trusting the executor's claim; a request whose claim disagrees is flagged.

use serde::{Deserialize, Serialize};

/// The price of one model, in US dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Provider as sent in `gen_ai.provider.name` (or `gen_ai.system`), e.g. `openai`.
    pub provider: String,
    /// Model name; a trailing `*` matches any suffix (`claude-sonnet-4*` covers dated
    /// releases). The longest matching entry wins.
    pub model: String,
    /// Per million input tokens that were not read from a cache.
    pub input_per_million: f64,
    /// Per million output tokens.
    pub output_per_million: f64,
    /// Per million input tokens read from a prompt cache; defaults to the input price.
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
}

/// Token counts of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    /// Input tokens in total (cached ones included, as the GenAI conventions count them).
    pub input: i64,
    /// Output tokens.
    pub output: i64,
    /// Input tokens read from a prompt cache.
    pub cache_read: i64,
}

/// The configured prices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable(pub Vec<ModelPrice>);

/// A price table that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PriceError {
    /// A price is negative or not a number.
    #[error("price for {provider}/{model}: {field} must be a non-negative number")]
    Invalid {
        /// Provider of the entry.
        provider: String,
        /// Model of the entry.
        model: String,
        /// The offending field.
        field: &'static str,
    },
}

impl PriceTable {
    /// Checks every price.
    pub fn validate(&self) -> Result<(), PriceError> {
        for p in &self.0 {
            let fields = [
                ("input_per_million", Some(p.input_per_million)),
                ("output_per_million", Some(p.output_per_million)),
                ("cached_input_per_million", p.cached_input_per_million),
            ];
            for (field, value) in fields {
                if value.is_some_and(|v| !v.is_finite() || v < 0.0) {
                    return Err(PriceError::Invalid {
                        provider: p.provider.clone(),
                        model: p.model.clone(),
                        field,
                    });
                }
            }
        }
        Ok(())
    }

    /// The entry for a provider and model: exact model name first, then the longest
    /// matching `prefix*`. Provider and model compare ASCII case-insensitively.
    pub fn lookup(&self, provider: &str, model: &str) -> Option<&ModelPrice> {
        let model = model.to_ascii_lowercase();
        self.0
            .iter()
            .filter(|p| p.provider.eq_ignore_ascii_case(provider))
            .filter_map(|p| {
                let pattern = p.model.to_ascii_lowercase();
                match pattern.strip_suffix('*') {
                    Some(prefix) if model.starts_with(prefix) => Some((prefix.len(), p)),
                    None if pattern == model => Some((usize::MAX, p)),
                    _ => None,
                }
            })
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, p)| p)
    }

    /// The cost in US dollars of one call, or `None` when the model has no price.
    pub fn cost(&self, provider: &str, model: &str, tokens: TokenCounts) -> Option<f64> {
        let p = self.lookup(provider, model)?;
        let cached = tokens.cache_read.clamp(0, tokens.input.max(0));
        let uncached = tokens.input.max(0) - cached;
        let cached_price = p.cached_input_per_million.unwrap_or(p.input_per_million);
        Some(
            (uncached as f64 * p.input_per_million
                + cached as f64 * cached_price
                + tokens.output.max(0) as f64 * p.output_per_million)
                / 1_000_000.0,
        )
    }
}

/// Whether an executor's claimed cost disagrees with toolwatch's: by more than a cent and
/// more than 1% of the larger figure (rounding in either system is not a disagreement).
pub fn disagrees(computed: f64, claimed: f64) -> bool {
    let diff = (computed - claimed).abs();
    diff > 0.01 && diff > 0.01 * computed.abs().max(claimed.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PriceTable {
        let p = |provider: &str, model: &str, i: f64, o: f64, c: Option<f64>| ModelPrice {
            provider: provider.into(),
            model: model.into(),
            input_per_million: i,
            output_per_million: o,
            cached_input_per_million: c,
        };
        PriceTable(vec![
            p("openai", "gpt-4o", 2.5, 10.0, Some(1.25)),
            p("openai", "gpt-4o-mini*", 0.15, 0.6, None),
            p("anthropic", "claude-sonnet-4*", 3.0, 15.0, Some(0.3)),
            p("anthropic", "claude-sonnet-4-5*", 3.5, 16.0, None),
        ])
    }

    #[test]
    fn costs_follow_the_table() {
        let t = table();
        let tok = |input, output, cache_read| TokenCounts {
            input,
            output,
            cache_read,
        };
        // (provider, model, tokens, expected USD)
        let cases: &[(&str, &str, TokenCounts, Option<f64>)] = &[
            ("openai", "gpt-4o", tok(1_000_000, 0, 0), Some(2.5)),
            ("openai", "gpt-4o", tok(0, 1_000_000, 0), Some(10.0)),
            // 400k cached at 1.25, 600k at 2.5, 200k out at 10.
            (
                "openai",
                "gpt-4o",
                tok(1_000_000, 200_000, 400_000),
                Some(4.0),
            ),
            ("OpenAI", "GPT-4o", tok(1_000, 500, 0), Some(0.0075)),
            (
                "openai",
                "gpt-4o-mini-2024-07-18",
                tok(2_000_000, 1_000_000, 0),
                Some(0.9),
            ),
            // No cached price: cached tokens cost the input price.
            (
                "openai",
                "gpt-4o-mini",
                tok(1_000_000, 0, 1_000_000),
                Some(0.15),
            ),
            // The longest prefix wins.
            (
                "anthropic",
                "claude-sonnet-4-5-20250929",
                tok(1_000_000, 0, 0),
                Some(3.5),
            ),
            (
                "anthropic",
                "claude-sonnet-4-20250514",
                tok(0, 0, 0),
                Some(0.0),
            ),
            // A cache count above the input count is clamped.
            (
                "anthropic",
                "claude-sonnet-4",
                tok(100, 0, 500),
                Some(0.00003),
            ),
            ("openai", "gpt-5", tok(1_000, 1_000, 0), None),
            ("azure", "gpt-4o", tok(1_000, 1_000, 0), None),
        ];
        for (provider, model, tokens, expected) in cases {
            let got = t.cost(provider, model, *tokens);
            match (got, expected) {
                (Some(g), Some(e)) => assert!((g - e).abs() < 1e-12, "{model}: {g} != {e}"),
                (g, e) => assert_eq!(g, *e, "{model}"),
            }
        }
    }

    #[test]
    fn disagreement_ignores_rounding() {
        assert!(!disagrees(1.000, 1.005));
        assert!(!disagrees(0.004, 0.0));
        assert!(disagrees(1.00, 1.50));
        assert!(disagrees(0.0, 0.25));
        assert!(!disagrees(100.0, 100.9));
        assert!(disagrees(100.0, 101.5));
    }

    #[test]
    fn negative_prices_are_refused() {
        let mut t = table();
        t.0[1].output_per_million = -1.0;
        assert_eq!(
            t.validate(),
            Err(PriceError::Invalid {
                provider: "openai".into(),
                model: "gpt-4o-mini*".into(),
                field: "output_per_million"
            })
        );
        assert!(table().validate().is_ok());
    }
}
