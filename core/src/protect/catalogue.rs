//! The default redaction catalogue: value detectors and key rules that are on with no config.
//!
//! Each detector has an id (stable: it appears in archive rows and metric labels), a one-line
//! description, a regex whose capture group `group` is what gets replaced, keywords for the
//! Aho-Corasick prefilter (a detector runs only on strings that contain one of them; no
//! keywords means it always runs, so those few must be cheap), and an optional validator.
//! The table tests at the bottom give every rule its true and false positives.

use super::key_context::KeyClass;
use super::rules::{Action, DetectorSpec, KeyRuleSpec};
use super::validators::Validator;

struct D {
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
    regex: &'static str,
    group: usize,
    validator: Option<Validator>,
}

const ENTROPY_4_2: Option<Validator> = Some(Validator::MinEntropy { bits: 4.2 });

/// Characters a token may continue with; used to anchor token ends without lookaround.
const DETECTORS: &[D] = &[
    // --- Cloud providers -------------------------------------------------------------------
    D { id: "aws_access_key_id", description: "AWS access key id (AKIA/ASIA/ABIA/ACCA…)",
        keywords: &["akia", "asia", "abia", "acca", "a3t"],
        regex: r"(?:^|[^A-Za-z0-9])((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})(?:[^A-Za-z0-9]|$)", group: 1, validator: None },
    D { id: "aws_secret_access_key", description: "AWS secret access key next to an aws/secret keyword",
        keywords: &["aws"],
        regex: r#"(?i)aws[a-z0-9_ .\-]{0,25}(?:secret|key)[a-z0-9_ .\-]{0,20}["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)"#, group: 1, validator: None },
    D { id: "aws_bedrock_api_key", description: "Amazon Bedrock API key (ABSK…)",
        keywords: &["absk", "bedrock-api-key-"],
        regex: r"(?-u:\b)((?:ABSK[A-Za-z0-9+/]{100,}={0,2})|(?:bedrock-api-key-[A-Za-z0-9+/=]{100,}))", group: 1, validator: None },
    D { id: "gcp_api_key", description: "Google Cloud / Gemini API key (AIza…)",
        keywords: &["aiza"],
        regex: r"(?-u:\b)(AIza[0-9A-Za-z_\-]{35})(?:[^0-9A-Za-z_\-]|$)", group: 1, validator: None },
    D { id: "gcp_service_account_private_key_id", description: "private_key_id of a Google service-account JSON key",
        keywords: &["private_key_id"],
        regex: r#"private_key_id"\s*:\s*"([a-f0-9]{40})""#, group: 1, validator: None },
    D { id: "azure_storage_account_key", description: "Azure storage AccountKey in a connection string",
        keywords: &["accountkey"],
        regex: r"(?i)AccountKey=([A-Za-z0-9+/]{86}==)", group: 1, validator: None },
    D { id: "azure_identifiable_key", description: "Microsoft identifiable key (84 or 88 base64 characters, JQQJ9 at offset 52)",
        keywords: &["jqqj9"],
        regex: r"(?:^|[^A-Za-z0-9+/])([A-Za-z0-9+/]{52}JQQJ9[A-Za-z0-9+/]{27}(?:[A-Za-z0-9+/]{2}==)?)(?:[^A-Za-z0-9+/=]|$)", group: 1, validator: None },
    D { id: "azure_ad_client_secret", description: "Azure AD (Entra) client secret (…Q~…)",
        keywords: &["q~"],
        regex: r"(?:^|[^A-Za-z0-9_~.\-])([A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34})(?:[^A-Za-z0-9_~.\-]|$)", group: 1, validator: None },
    D { id: "digitalocean_token", description: "DigitalOcean personal, OAuth or refresh token",
        keywords: &["dop_v1_", "doo_v1_", "dor_v1_"],
        regex: r"(?-u:\b)(do[opr]_v1_[a-f0-9]{64})(?-u:\b)", group: 1, validator: None },
    D { id: "heroku_api_key", description: "Heroku API key (HRKU-…)",
        keywords: &["hrku-"],
        regex: r"(?:^|[^A-Za-z0-9_])(HRKU-(?:AA)?[0-9A-Za-z_\-]{58,60}|HRKU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "cloudflare_origin_ca_key", description: "Cloudflare origin CA key (v1.0-…)",
        keywords: &["v1.0-"],
        regex: r"(?-u:\b)(v1\.0-[a-f0-9]{24}-[a-f0-9]{146})(?-u:\b)", group: 1, validator: None },
    // --- Source hosting and CI ---------------------------------------------------------------
    // Real GitHub and npm tokens carry a CRC32 checksum: a token that passes it fires the
    // verified rule; the same shape without a valid checksum is still removed, under the
    // `_unverified` id, so provenance says how sure the match was.
    D { id: "github_token", description: "GitHub token (ghp_/gho_/ghu_/ghs_/ghr_) with a valid CRC32 checksum",
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        regex: r"(?-u:\b)((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36})(?-u:\b)", group: 1, validator: Some(Validator::GithubCrc32) },
    D { id: "github_token_unverified", description: "GitHub token shape (ghp_/gho_/ghu_/ghs_/ghr_) without a valid checksum",
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        regex: r"(?-u:\b)((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36})(?-u:\b)", group: 1, validator: None },
    D { id: "github_fine_grained_pat", description: "GitHub fine-grained personal access token",
        keywords: &["github_pat_"],
        regex: r"(?-u:\b)(github_pat_[A-Za-z0-9_]{82})(?-u:\b)", group: 1, validator: None },
    D { id: "gitlab_token", description: "GitLab personal, pipeline, runner or deploy token (glpat-/glptt-/glrt-/gldt-…)",
        keywords: &["glpat-", "glptt-", "glrt-", "gldt-", "glsoat-", "glcbt-", "glft-", "glimt-", "glagent-", "gloas-", "glrtr-", "gr1348941"],
        regex: r"(?-u:\b)((?:glpat|glptt|glrt|glrtr|gldt|glsoat|glcbt|glft|glimt|glagent|gloas)-[A-Za-z0-9_\-.]{20,}|GR1348941[A-Za-z0-9_\-]{20,})", group: 1, validator: None },
    D { id: "npm_token", description: "npm access token (npm_…) with a valid CRC32 checksum",
        keywords: &["npm_"],
        regex: r"(?-u:\b)(npm_[A-Za-z0-9]{36})(?-u:\b)", group: 1, validator: Some(Validator::NpmCrc32) },
    D { id: "npm_token_unverified", description: "npm access token shape (npm_…) without a valid checksum",
        keywords: &["npm_"],
        regex: r"(?-u:\b)(npm_[A-Za-z0-9]{36})(?-u:\b)", group: 1, validator: None },
    D { id: "pypi_token", description: "PyPI upload token",
        keywords: &["pypi-ageichlwas5vcmc"],
        regex: r"(?-u:\b)(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,})", group: 1, validator: None },
    D { id: "atlassian_api_token", description: "Atlassian API token or Bitbucket repository, project or workspace access token (ATATT…/ATCTT…)",
        keywords: &["atatt", "atctt"],
        regex: r"(?-u:\b)(AT[AC]TT[A-Za-z0-9_\-=]{180,})", group: 1, validator: None },
    D { id: "bitbucket_data_center_token", description: "Bitbucket Data Center HTTP access token (BBDC- + 44 base64)",
        keywords: &["bbdc-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(BBDC-[NMO][ADgjQTwz][A-Za-z0-9+/]{42})(?:[^A-Za-z0-9_\-+/=]|$)", group: 1, validator: None },
    D { id: "hashicorp_token", description: "HashiCorp Terraform Cloud or Vault token",
        keywords: &[".atlasv1.", "hvs.", "hvb.", "hvr."],
        regex: r"(?-u:\b)([A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}|hv[sbr]\.[A-Za-z0-9_\-]{24,})", group: 1, validator: None },
    D { id: "docker_pat", description: "Docker Hub personal or organization access token (dckr_pat_/dckr_oat_)",
        keywords: &["dckr_pat_", "dckr_oat_"],
        regex: r"(?-u:\b)(dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27,})", group: 1, validator: None },
    // --- LLM providers -----------------------------------------------------------------------
    D { id: "openai_api_key", description: "OpenAI API key (sk-…T3BlbkFJ…, sk-proj-, sk-svcacct-, sk-admin-)",
        keywords: &["sk-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}|[A-Za-z0-9]{48}))(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "anthropic_api_key", description: "Anthropic API or admin key (sk-ant-…)",
        keywords: &["sk-ant-"],
        regex: r"(?-u:\b)(sk-ant-(?:api|admin|sid)\d{2}-[A-Za-z0-9_\-]{80,})", group: 1, validator: None },
    D { id: "huggingface_token", description: "Hugging Face access or organization token (hf_/api_org_)",
        keywords: &["hf_", "api_org_"],
        regex: r"(?:^|[^A-Za-z0-9_])((?:hf_|api_org_)[A-Za-z]{34})(?:[^A-Za-z0-9_]|$)", group: 1, validator: None },
    D { id: "groq_api_key", description: "Groq API key (gsk_…)",
        keywords: &["gsk_"],
        regex: r"(?-u:\b)(gsk_[A-Za-z0-9]{52})(?-u:\b)", group: 1, validator: None },
    D { id: "perplexity_api_key", description: "Perplexity API key (pplx-…)",
        keywords: &["pplx-"],
        regex: r"(?-u:\b)(pplx-[A-Za-z0-9]{48})(?-u:\b)", group: 1, validator: None },
    D { id: "replicate_api_token", description: "Replicate API token (r8_…)",
        keywords: &["r8_"],
        regex: r"(?-u:\b)(r8_[A-Za-z0-9]{37})(?-u:\b)", group: 1, validator: None },
    // --- Payment providers -------------------------------------------------------------------
    D { id: "stripe_key", description: "Stripe secret or restricted key (sk_/rk_ live/test)",
        keywords: &["sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk_prod_", "rk_prod_"],
        regex: r"(?-u:\b)((?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,99})(?-u:\b)", group: 1, validator: None },
    D { id: "stripe_webhook_secret", description: "Stripe webhook signing secret (whsec_…)",
        keywords: &["whsec_"],
        regex: r"(?-u:\b)(whsec_[A-Za-z0-9+/=]{32,})", group: 1, validator: None },
    D { id: "square_token", description: "Square access token or OAuth secret",
        keywords: &["sq0atp-", "sq0csp-", "eaaa"],
        regex: r"(?:^|[^A-Za-z0-9_])(sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,60}|EAAA[A-Za-z0-9_\-+=]{60})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "braintree_access_token", description: "Braintree / PayPal access token",
        keywords: &["access_token$production$"],
        regex: r"(access_token\$production\$[a-z0-9]{16}\$[a-f0-9]{32})", group: 1, validator: None },
    // --- Chat, mail and webhook tokens -------------------------------------------------------
    D { id: "slack_token", description: "Slack bot, user, app, legacy or config token (xox…, xapp-)",
        keywords: &["xox", "xapp-"],
        regex: r"(?-u:\b)(xox[abeoprs]-(?:[0-9]{6,}-){1,3}[0-9A-Za-z\-]{8,}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+|xoxe\.xox[bp]-\d-[A-Za-z0-9]{100,}|xoxe-\d-[A-Za-z0-9]{100,})", group: 1, validator: None },
    D { id: "slack_webhook_url", description: "Slack incoming-webhook or workflow URL",
        keywords: &["hooks.slack.com"],
        regex: r"(?i)((?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,})", group: 1, validator: None },
    D { id: "discord_webhook_url", description: "Discord webhook URL",
        keywords: &["discord"],
        regex: r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]{60,})", group: 1, validator: None },
    D { id: "teams_webhook_url", description: "Microsoft Teams / Office 365 webhook URL",
        keywords: &["webhook.office.com", "logic.azure.com"],
        regex: r#"(https://[A-Za-z0-9.\-]+\.(?:webhook\.office\.com/webhookb2|logic\.azure\.com[:0-9]*/workflows)/[^\s"'<>]+)"#, group: 1, validator: None },
    D { id: "zapier_webhook_url", description: "Zapier catch hook URL (anyone holding it can trigger the Zap)",
        keywords: &["hooks.zapier.com"],
        regex: r"(https://hooks\.zapier\.com/hooks/catch/\d+/[A-Za-z0-9]+/?)", group: 1, validator: None },
    D { id: "telegram_bot_token", description: "Telegram bot token (id:AA…)",
        keywords: &[":aa"],
        regex: r"(?:^|[^0-9])([0-9]{5,16}:AA[A-Za-z0-9_\-]{32,33})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "sendgrid_api_key", description: "SendGrid API key (SG.…)",
        keywords: &["sg."],
        regex: r"(?:^|[^A-Za-z0-9_])(SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "twilio_api_key", description: "Twilio API key SID (SK + 32 hex)",
        // `sk` and a hex digit, not `sk` alone: a two-byte keyword is looked for under every
        // third byte, and "task", "ask" and "sku" sent the keyword pass into its automaton.
        keywords: &["sk0", "sk1", "sk2", "sk3", "sk4", "sk5", "sk6", "sk7", "sk8", "sk9", "ska", "skb", "skc", "skd", "ske", "skf"],
        regex: r"(?-u:\b)(SK[0-9a-fA-F]{32})(?-u:\b)", group: 1, validator: None },
    D { id: "mailchimp_api_key", description: "Mailchimp API key (32 hex + -usN)",
        keywords: &["-us"],
        regex: r"(?-u:\b)([0-9a-f]{32}-us\d{1,2})(?-u:\b)", group: 1, validator: None },
    D { id: "shopify_token", description: "Shopify access token or shared secret",
        keywords: &["shpat_", "shpca_", "shppa_", "shpss_"],
        regex: r"(?-u:\b)(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})(?-u:\b)", group: 1, validator: None },
    // --- Tokens in standard formats ----------------------------------------------------------
    D { id: "jwt", description: "JSON Web Token whose header decodes to a JOSE header (alg, typ, kid, …)",
        keywords: &["eyj"],
        regex: r"(?-u:\b)(ey[A-Za-z0-9_\-]{10,}\.ey[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*)", group: 1, validator: Some(Validator::JwtHeader) },
    D { id: "private_key", description: "Private key in PEM, OpenSSH, PGP or encrypted armour (to END, or to the end of the text if cut)",
        keywords: &["private key"],
        regex: r"(-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,.\\\-]*))", group: 1, validator: Some(Validator::PemBody) },
    D { id: "putty_private_key", description: "PuTTY private key file (PuTTY-User-Key-File-N)",
        keywords: &["putty-user-key-file"],
        regex: r"(PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC: [0-9a-fA-F]+|$))", group: 1, validator: None },
    D { id: "onepassword_secret_key", description: "1Password account secret key (A3-…)",
        keywords: &["a3-"],
        regex: r"(?-u:\b)(A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5})(?-u:\b)", group: 1, validator: None },
    D { id: "onepassword_service_account_token", description: "1Password service-account token (ops_eyJ…)",
        keywords: &["ops_eyj"],
        regex: r"(?-u:\b)(ops_eyJ[A-Za-z0-9+/_\-]{250,}={0,3})", group: 1, validator: None },
    D { id: "age_secret_key", description: "age encryption secret key (AGE-SECRET-KEY-1…)",
        keywords: &["age-secret-key-1"],
        regex: r"(?-u:\b)(AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})(?-u:\b)", group: 1, validator: None },
    D { id: "notion_api_token", description: "Notion integration token (ntn_…, and secret_ + 43 as issued before 2024)",
        keywords: &["ntn_", "secret_"],
        regex: r"(?-u:\b)(ntn_[A-Za-z0-9]{46}|secret_[A-Za-z0-9]{43})(?-u:\b)", group: 1, validator: None },
    D { id: "sourcegraph_access_token", description: "Sourcegraph access token (sgp_…)",
        keywords: &["sgp_"],
        regex: r"(?-u:\b)(sgp_(?:(?:[A-Fa-f0-9]{16}|local)_)?[A-Fa-f0-9]{40})(?-u:\b)", group: 1, validator: None },
    D { id: "intra42_client_secret", description: "42 intranet OAuth client secret (s-s4t2ud-/s-s4t2af-)",
        keywords: &["s-s4t2ud-", "s-s4t2af-"],
        regex: r"(?-u:\b)(s-s4t2(?:ud|af)-[a-f0-9]{64})(?-u:\b)", group: 1, validator: None },
    D { id: "facebook_access_token", description: "Facebook / Meta Graph API access token (EAA…)",
        keywords: &["eaa"],
        regex: r"(?:^|[^A-Za-z0-9+/_\-])(EAA[A-Za-z0-9]{100,})(?:[^A-Za-z0-9+/=_\-]|$)", group: 1, validator: None },
    D { id: "alibaba_access_key_id", description: "Alibaba Cloud AccessKey id (LTAI…)",
        keywords: &["ltai"],
        // 24 characters, or 16 for older ids (as public rule sets have it).
        regex: r"(?-u:\b)(LTAI[A-Za-z0-9]{12}(?:[A-Za-z0-9]{8})?)(?-u:\b)", group: 1, validator: None },
    D { id: "harness_api_key", description: "Harness personal or service-account token (pat./sat.)",
        keywords: &["pat.", "sat."],
        regex: r"(?-u:\b)((?:pat|sat)\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20})(?-u:\b)", group: 1, validator: None },
    // A seed's first two bytes are fixed per key type: its text starts S, the type's letter
    // and A. The checksum makes a bare one, with no word of NATS near it, certain enough.
    D { id: "nats_nkey_seed_checked", description: "NATS NKEY seed (SUA/SAA/SOA/SNA/SCA/SXA + 55 base32) with a valid CRC-16 checksum, anywhere",
        keywords: &["sua", "saa", "soa", "sna", "sca", "sxa"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(S[AUONCX]A[A-Z2-7]{55})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: Some(Validator::NkeyCrc16) },
    // --- More vendor tokens (issue 13) -------------------------------------------------------
    // Formats from the vendors' documentation and public rule sets (gitleaks, trufflehog).
    // Each token is anchored by a character outside its alphabet (or the text's ends) on both
    // sides, so a token that starts or ends with `-`, `_` or `.` is still matched whole.
    D { id: "linear_api_key", description: "Linear API key (lin_api_ + 40 alphanumerics)",
        keywords: &["lin_api_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(lin_api_[A-Za-z0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "doppler_token", description: "Doppler personal, service, service-account, CLI, SCIM or audit token (dp.pt./dp.st./dp.sa./dp.ct./dp.scim./dp.audit.)",
        keywords: &["dp.pt.", "dp.st.", "dp.sa.", "dp.ct.", "dp.scim.", "dp.audit."],
        regex: r"(?:^|[^A-Za-z0-9_\-])(dp\.(?:pt|st(?:\.[a-z0-9_\-]{2,35})?|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "pulumi_access_token", description: "Pulumi access token (pul- + 40 hex)",
        keywords: &["pul-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(pul-[a-f0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "postman_api_key", description: "Postman API key (PMAK- + 24 hex - 34 hex)",
        keywords: &["pmak-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "databricks_token", description: "Databricks personal access token (dapi + 32 hex, optional -N)",
        keywords: &["dapi"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(dapi[a-f0-9]{32}(?:-\d)?)(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "grafana_cloud_token", description: "Grafana Cloud access-policy token (glc_ + base64 JSON)",
        keywords: &["glc_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(glc_eyJ[A-Za-z0-9+/_\-]{29,}={0,2})", group: 1, validator: None },
    D { id: "grafana_service_account_token", description: "Grafana service-account token (glsa_ + 32 alphanumerics _ 8 hex)",
        keywords: &["glsa_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "mailgun_api_key", description: "Mailgun API or signing key (key- + 32 hex, or 32-8-8 hex) after the word mailgun",
        keywords: &["mailgun"],
        regex: r"(?i)mailgun[^\n]{0,60}?[^A-Za-z0-9_\-](key-[a-f0-9]{32}|[a-f0-9]{32}-[a-f0-9]{8}-[a-f0-9]{8})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "nats_nkey_seed", description: "NATS NKEY seed (S + O/A/U/N/C/P/X + 56 base32) in text naming nats, nkey or seed",
        keywords: &["nats", "nkey", "seed"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(S[OAUNCPX][A-Z2-7]{56})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "okta_api_token", description: "Okta API token (00 + 40 base64url characters) after the word okta",
        keywords: &["okta"],
        regex: r"(?i)(?:^|[^a-z])okta[^\n]{0,60}?[^A-Za-z0-9_\-](00[A-Za-z0-9_\-]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "dropbox_access_token", description: "Dropbox short-lived access token (sl. / sl.u. + 130 or more base64url characters)",
        keywords: &["sl."],
        regex: r"(?:^|[^A-Za-z0-9_\-.])(sl\.(?:u\.)?[A-Za-z0-9_\-=]{130,})", group: 1, validator: None },
    D { id: "salesforce_access_token", description: "Salesforce access or session token (00D org id ! session)",
        keywords: &["00d"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(00D[A-Za-z0-9]{12,15}![A-Za-z0-9_.]{80,})", group: 1, validator: None },
    D { id: "sentry_token", description: "Sentry organization or user auth token (sntrys_/sntryu_)",
        keywords: &["sntrys_", "sntryu_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sntrys_eyJ[A-Za-z0-9+/=_\-]{40,}|sntryu_[a-f0-9]{64})(?:[^A-Za-z0-9_\-+/=]|$)", group: 1, validator: None },
    D { id: "supabase_secret_key", description: "Supabase personal access token or secret API key (sbp_/sb_secret_)",
        keywords: &["sbp_", "sb_secret_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sbp_(?:v0_)?[a-f0-9]{40}|sb_secret_[A-Za-z0-9_\-]{24,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "planetscale_token", description: "PlanetScale service token, password or OAuth token (pscale_tkn_/pscale_pw_/pscale_oauth_)",
        keywords: &["pscale_tkn_", "pscale_pw_", "pscale_oauth_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(pscale_(?:tkn|pw|oauth)_[A-Za-z0-9=_.\-]{32,})", group: 1, validator: None },
    D { id: "netlify_access_token", description: "Netlify personal access token (nfp_ + 36 alphanumerics)",
        keywords: &["nfp_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(nfp_[A-Za-z0-9]{36})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "figma_access_token", description: "Figma personal access token (figd_ + 40 or more base64url characters)",
        keywords: &["figd_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(figd_[A-Za-z0-9_\-]{40,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "nuget_api_key", description: "NuGet API key (oy2 + 43 lowercase alphanumerics)",
        keywords: &["oy2"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(oy2[a-z0-9]{43})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "rubygems_api_key", description: "RubyGems API key (rubygems_ + 48 hex)",
        keywords: &["rubygems_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(rubygems_[a-f0-9]{48})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "clojars_deploy_token", description: "Clojars deploy token (CLOJARS_ + 60 alphanumerics)",
        keywords: &["clojars_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(CLOJARS_[A-Za-z0-9]{60})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "posthog_personal_api_key", description: "PostHog personal or project secret API key (phx_/phs_ + 42 to 49 alphanumerics) or OAuth token (pha_/phr_); phc_ project keys are public",
        keywords: &["phx_", "phs_", "pha_", "phr_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(ph[xs]_[A-Za-z0-9]{42,49}|ph[ar]_[A-Za-z0-9]{40,64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "xai_api_key", description: "xAI API key (xai- + 80 alphanumerics)",
        keywords: &["xai-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(xai-[A-Za-z0-9]{80})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "new_relic_key", description: "New Relic user, admin, insert or license key (NRAK-/NRAA-/NRII-, 36 hex + NRAL; NRJS- browser keys are public)",
        keywords: &["nrak-", "nraa-", "nrii-", "nral"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(NRAK-[A-Z0-9]{27}|NRAA-[a-f0-9]{27}|NRII-[A-Za-z0-9\-]{32}|[a-f0-9]{36}NRAL)(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "dynatrace_api_token", description: "Dynatrace API token (dt0c01. + 24 . 64)",
        keywords: &["dt0c01."],
        regex: r"(?:^|[^A-Za-z0-9_\-])(dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "tailscale_key", description: "Tailscale API, auth, OAuth client, SCIM or webhook key (tskey-…)",
        keywords: &["tskey-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(tskey-(?:api|auth|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "brevo_api_key", description: "Brevo (Sendinblue) API or SMTP key (xkeysib-/xsmtpsib- + 64 hex - 16 alphanumerics)",
        keywords: &["xkeysib-", "xsmtpsib-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(x(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{16})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "docker_swarm_token", description: "Docker Swarm join token (SWMTKN-1-…) or unlock key (SWMKEY-1-…)",
        keywords: &["swmtkn-1-", "swmkey-1-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(SWMTKN-1-[a-z0-9]{50}-[a-z0-9]{25}|SWMKEY-1-[A-Za-z0-9+/]{43})(?:[^A-Za-z0-9_\-+/]|$)", group: 1, validator: None },
    D { id: "sonarqube_token", description: "SonarQube user, project or global analysis token (squ_/sqp_/sqa_ + 40 hex)",
        keywords: &["squ_", "sqp_", "sqa_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sq[upa]_[a-f0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "twilio_auth_token", description: "Twilio auth token (32 hex) after the word twilio",
        keywords: &["twilio"],
        regex: r"(?i)twilio[^\n]{0,40}?(?:^|[^A-Za-z0-9_\-])([a-f0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "cohere_api_key", description: "Cohere API key (40 alphanumerics) after the word cohere or CO_API_KEY",
        keywords: &["cohere", "co_api_key"],
        regex: r"(?i)(?:cohere|co_api_key)[^\n]{0,40}?(?:^|[^A-Za-z0-9_\-])([A-Za-z0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: Some(Validator::NotTrivial) },
    D { id: "discord_bot_token", description: "Discord bot token (user id . timestamp . HMAC) after the word discord or bot",
        keywords: &["discord", "bot "],
        regex: r"(?i)(?:discord|bot)[^\n]{0,40}?(?:^|[^A-Za-z0-9_\-.])([MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "tencent_cloud_secret_id", description: "Tencent Cloud API SecretId (AKID + 32 alphanumerics)",
        keywords: &["akid"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(AKID[A-Za-z0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "firebase_cloud_messaging_server_key", description: "Firebase Cloud Messaging legacy server key (AAAA…:APA91b…)",
        keywords: &[":apa91b"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(AAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{134})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "jfrog_token", description: "JFrog Artifactory API key (AKCp + 69) or identity/reference token (cmVmdGtu + 56)",
        keywords: &["akcp", "cmvmdgtu"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(AKCp[0-9][A-Za-z0-9]{68}|cmVmdGtu[A-Za-z0-9]{56})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "mistral_api_key", description: "Mistral AI API key (32 alphanumerics) after the word mistral",
        keywords: &["mistral"],
        regex: r"(?i)mistral[^\n]{0,40}?(?:^|[^A-Za-z0-9_\-])([A-Za-z0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: Some(Validator::NotTrivial) },
    D { id: "llamacloud_api_key", description: "LlamaCloud (LlamaIndex) API key (llx- + 48)",
        keywords: &["llx-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(llx-[A-Za-z0-9_\-]{48})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "together_api_key", description: "Together AI API key (tgp_v1_ + 43 base64url)",
        keywords: &["tgp_v1_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(tgp_v1_[A-Za-z0-9_\-]{43})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "wundergraph_cosmo_api_key", description: "WunderGraph Cosmo API key (cosmo_ + 32 hex)",
        keywords: &["cosmo_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(cosmo_[a-f0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "bitbucket_app_password", description: "Bitbucket app password (ATBB + 24 alphanumerics + 8 hex of checksum)",
        keywords: &["atbb"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(ATBB[A-Za-z0-9]{24}[A-F0-9]{8})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "google_oauth_client_secret", description: "Google OAuth 2.0 client secret (GOCSPX- + 28)",
        keywords: &["gocspx-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(GOCSPX-[A-Za-z0-9_\-]{28})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "grafana_api_key", description: "Grafana API key of the older kind (base64 of {\"k\":…}, eyJrIjoi…)",
        keywords: &["eyjrijoi"],
        regex: r"(?:^|[^A-Za-z0-9_\-+/])(eyJrIjoi[A-Za-z0-9+/]{40,400}={0,2})(?:[^A-Za-z0-9_\-+/=]|$)", group: 1, validator: None },
    D { id: "dropbox_long_lived_token", description: "Dropbox long-lived access token (11 + AAAAAAAAAA + 43)",
        keywords: &["aaaaaaaaaa"],
        regex: r"(?:^|[^A-Za-z0-9_\-+/])([A-Za-z0-9]{11}AAAAAAAAAA[A-Za-z0-9_\-=]{43})(?:[^A-Za-z0-9_\-=+/]|$)", group: 1, validator: None },
    D { id: "alibaba_access_key_secret", description: "Alibaba Cloud AccessKey secret (30 alphanumerics) after an LTAI AccessKey id",
        keywords: &["ltai"],
        regex: r"LTAI[A-Za-z0-9]{12,20}[^\n]{0,40}?(?:[^A-Za-z0-9_\-])([A-Za-z0-9]{30})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: Some(Validator::NotTrivial) },
    D { id: "salesforce_consumer_key", description: "Salesforce connected-app consumer key (3MVG + 50 to 100, not ending in a dot)",
        keywords: &["3mvg"],
        regex: r"(?:^|[^A-Za-z0-9_\-.])(3MVG[A-Za-z0-9._]{49,99}[A-Za-z0-9_])(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "instagram_access_token", description: "Instagram API access token (IGQVJ + 100 or more)",
        keywords: &["igqvj"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(IGQVJ[A-Za-z0-9_\-]{100,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "google_oauth_access_token", description: "Google OAuth 2.0 access token (ya29. + 20 or more)",
        keywords: &["ya29."],
        regex: r"(?:^|[^A-Za-z0-9_\-])(ya29\.[A-Za-z0-9_\-]{20,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "amazon_mws_auth_token", description: "Amazon Marketplace Web Service auth token (amzn.mws.<uuid>)",
        keywords: &["amzn.mws."],
        regex: r"(?-u:\b)(amzn\.mws\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?-u:\b)", group: 1, validator: None },
    D { id: "openrouter_api_key", description: "OpenRouter API key (sk-or-v1- + 64 hex)",
        keywords: &["sk-or-v1-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk-or-v1-[a-f0-9]{64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "sk_hex_api_key", description: "API key of sk- + 32 hex (DeepSeek and other OpenAI-compatible providers)",
        keywords: &["sk-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk-[a-f0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "nvidia_api_key", description: "NVIDIA API catalog / NIM key (nvapi- + 60 to 70)",
        keywords: &["nvapi-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(nvapi-[A-Za-z0-9_\-]{60,70})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "cerebras_api_key", description: "Cerebras API key (csk- + 48 lowercase alphanumerics)",
        keywords: &["csk-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(csk-[a-z0-9]{48})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "pinecone_api_key", description: "Pinecone API key (pcsk_ + id + _ + secret)",
        keywords: &["pcsk_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(pcsk_[A-Za-z0-9]{4,10}_[A-Za-z0-9]{50,80})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "tavily_api_key", description: "Tavily API key (tvly- + 30 to 40, optionally tvly-dev-/tvly-prod-)",
        keywords: &["tvly-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(tvly-(?:dev-|prod-)?[A-Za-z0-9]{30,40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "langsmith_api_key", description: "LangSmith personal or service key (lsv2_pt_/lsv2_sk_ + 32 hex + _ + 10 hex)",
        keywords: &["lsv2_pt_", "lsv2_sk_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "langfuse_secret_key", description: "Langfuse secret key (sk-lf- + UUID; the pk-lf- public key stays)",
        keywords: &["sk-lf-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk-lf-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "e2b_api_key", description: "E2B sandbox API key (e2b_ + 40 hex)",
        keywords: &["e2b_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(e2b_[a-f0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "firecrawl_api_key", description: "Firecrawl API key (fc- + 32 hex)",
        keywords: &["fc-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(fc-[a-f0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "browserbase_api_key", description: "Browserbase API key (bb_live_ + 20 to 40)",
        keywords: &["bb_live_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(bb_live_[A-Za-z0-9_\-]{20,40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "elevenlabs_api_key", description: "ElevenLabs API key (sk_ + 48 hex)",
        keywords: &["sk_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk_[a-f0-9]{48})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "axiom_api_token", description: "Axiom API or personal token (xaat-/xapt- + UUID)",
        keywords: &["xaat-", "xapt-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(xa[ap]t-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "plaid_access_token", description: "Plaid access token (access-sandbox-/-development-/-production- + UUID)",
        keywords: &["access-sandbox-", "access-development-", "access-production-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "mongodb_atlas_service_account_secret", description: "MongoDB Atlas service-account secret (mdb_sa_sk_ + 20 to 100)",
        keywords: &["mdb_sa_sk_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(mdb_sa_sk_[A-Za-z0-9_\-]{20,100})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    // --- Developer platforms with prefixed tokens ---------------------------------------------
    // Gated on the name: `pat` alone would flag every path and pattern for a token the
    // bearer and key-context rules already take where it is used.
    D { id: "airtable_pat", description: "Airtable personal access token (pat + 14 alphanumerics + . + 64 hex) in text naming Airtable",
        keywords: &["airtable"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(pat[A-Za-z0-9]{14}\.[a-f0-9]{64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "contentful_pat", description: "Contentful personal access token (CFPAT- + 43)",
        keywords: &["cfpat-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(CFPAT-[A-Za-z0-9_\-]{43})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "mapbox_secret_token", description: "Mapbox secret access token (sk.eyJ…; pk. tokens are public)",
        keywords: &["sk.eyj"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{20,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "prefect_api_key", description: "Prefect Cloud API key (pnu_ + 36 alphanumerics)",
        keywords: &["pnu_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(pnu_[A-Za-z0-9]{36})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "readme_api_key", description: "ReadMe API key (rdme_ + 70 lowercase alphanumerics)",
        keywords: &["rdme_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(rdme_[a-z0-9]{70})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "shippo_api_token", description: "Shippo API token (shippo_live_/shippo_test_ + 40 hex)",
        keywords: &["shippo_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(shippo_(?:live|test)_[a-f0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "typeform_token", description: "Typeform personal access token (tfp_ + 59)",
        keywords: &["tfp_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(tfp_[A-Za-z0-9_\-.=]{59})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "adafruit_io_key", description: "Adafruit IO key (aio_ + 28 alphanumerics)",
        keywords: &["aio_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(aio_[A-Za-z0-9]{28})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "duffel_token", description: "Duffel API token (duffel_live_/duffel_test_ + 43)",
        keywords: &["duffel_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(duffel_(?:live|test)_[A-Za-z0-9_\-=]{43})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "easypost_api_key", description: "EasyPost production or test API key (EZAK/EZTK + 54 alphanumerics)",
        keywords: &["ezak", "eztk"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(EZ[AT]K[A-Za-z0-9]{54})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "infracost_api_key", description: "Infracost API key (ico- + 32 alphanumerics)",
        keywords: &["ico-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(ico-[A-Za-z0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "buildkite_token", description: "Buildkite API access token (bkua_ + 40 hex)",
        keywords: &["bkua_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(bkua_[a-f0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "circleci_pat", description: "CircleCI personal API token (CCIPAT_ + 22 + _ + 40 hex)",
        keywords: &["ccipat_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(CCIPAT_[A-Za-z0-9]{22}_[a-f0-9]{40})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "neon_api_key", description: "Neon API key (napi_ + 64 lowercase alphanumerics)",
        keywords: &["napi_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(napi_[a-z0-9]{64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "flyio_token", description: "Fly.io access token or macaroon (fo1_ + 43, fm1a_/fm1r_/fm2_ + base64)",
        keywords: &["fo1_", "fm1a_", "fm1r_", "fm2_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(fo1_[A-Za-z0-9_\-]{43}|fm(?:1[ar]|2)_[A-Za-z0-9+/]{100,}={0,3})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "render_api_key", description: "Render API key (rnd_ + 32 alphanumerics)",
        keywords: &["rnd_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(rnd_[A-Za-z0-9]{32})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "frameio_token", description: "Frame.io developer token (fio-u- + 64)",
        keywords: &["fio-u-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(fio-u-[A-Za-z0-9_\-=]{64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "vercel_blob_token", description: "Vercel Blob read-write token (vercel_blob_rw_ + 16 + _ + 30)",
        keywords: &["vercel_blob_rw_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(vercel_blob_rw_[A-Za-z0-9]{16}_[A-Za-z0-9]{30})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "google_oauth_refresh_token", description: "Google OAuth refresh token (1//0 + 40 or more)",
        keywords: &["1//0"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(1//0[A-Za-z0-9_\-]{40,})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "linear_oauth_token", description: "Linear OAuth access token (lin_oauth_ + 64 hex)",
        keywords: &["lin_oauth_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(lin_oauth_[a-f0-9]{64})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "aws_appsync_api_key", description: "AWS AppSync GraphQL API key (da2- + 26 lowercase alphanumerics)",
        keywords: &["da2-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(da2-[a-z0-9]{26})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: Some(Validator::NotTrivial) },
    D { id: "defined_networking_api_key", description: "Defined Networking (Nebula) API key (dnkey- + 26 - 52)",
        keywords: &["dnkey-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(dnkey-[A-Za-z0-9=_]{26}-[A-Za-z0-9=_]{52})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "twitter_bearer_token", description: "X (Twitter) app-only bearer token (20 to 22 A's, then URL-encoded base64 holding a %XX escape)",
        keywords: &["aaaaaaaaaaaaaaaaaaaa"],
        regex: r"(?:^|[^A-Za-z0-9%+/])(A{20,22}[A-Za-z0-9%]{8,60}%[0-9A-F]{2}[A-Za-z0-9%]{40,90})(?:[^A-Za-z0-9%+/=]|$)", group: 1, validator: Some(Validator::MinEntropy { bits: 3.5 }) },
    D { id: "akamai_edgegrid_token", description: "Akamai EdgeGrid client or access token (akab- + 16 - 16)",
        keywords: &["akab-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(akab-[a-z0-9]{16}-[a-z0-9]{16})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: Some(Validator::NotTrivial) },
    D { id: "vercel_token", description: "Vercel personal, integration, app access or refresh token or API key (vcp_/vci_/vca_/vcr_/vck_ + 56)",
        keywords: &["vcp_", "vci_", "vca_", "vcr_", "vck_"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(vc[pikar]_[A-Za-z0-9_\-]{50}[A-Za-z0-9]{6})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: ENTROPY_4_2 },
    // --- Credentials in headers, URLs and command lines --------------------------------------
    D { id: "bearer_token", description: "Bearer credential (Authorization: Bearer …)",
        keywords: &["bearer"],
        regex: r"(?i)(?-u:\b)bearer\s+([A-Za-z0-9_\-.~+/]{12,}=*)", group: 1, validator: None },
    D { id: "aws_sigv4_signature", description: "Signature of an AWS Signature Version 4 Authorization header (AWS4-HMAC-SHA256 Credential=…, Signature=<64 hex>)",
        keywords: &["aws4-hmac-sha256"],
        regex: r"AWS4-HMAC-SHA256\s+Credential=[^\s,]+,\s*SignedHeaders=[^\s,]+,\s*Signature=([a-f0-9]{64})(?-u:\b)", group: 1, validator: None },
    D { id: "smtp_auth_plain", description: "SMTP or IMAP AUTH PLAIN credentials (base64 of user and password), as a mail client's debug log writes them",
        keywords: &["auth plain"],
        regex: r"(?i)(?-u:\b)AUTH\s+PLAIN\s+([A-Za-z0-9+/]{8,}={0,2})(?:[^A-Za-z0-9+/=]|$)", group: 1, validator: None },
    D { id: "crypt_password_hash", description: "A password hash in crypt(3) form, as /etc/shadow, user tables and .htpasswd hold it (MD5 $1$ and Apache's $apr1$, SHA-256 $5$, SHA-512 $6$, bcrypt $2b$, yescrypt $y$, Argon2): crackable offline",
        keywords: &["$1$", "$apr1$", "$5$", "$6$", "$2a$", "$2b$", "$2y$", "$y$", "$argon2"],
        regex: r"(?:^|[^A-Za-z0-9$])(\$(?:[156]|apr1)\$(?:rounds=\d{1,9}\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}|\$2[aby]\$\d{2}\$[./A-Za-z0-9]{53}|\$y\$[./A-Za-z0-9]{1,12}\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{43}|\$argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]{11,}\$[A-Za-z0-9+/]{16,})(?:[^./A-Za-z0-9+$]|$)", group: 1, validator: None },
    // The hash alone is the group: a match starting with `{` reads as a template reference.
    D { id: "htpasswd_sha1", description: "Apache htpasswd SHA-1 password hash ({SHA} + 28 base64): crackable offline",
        keywords: &["{sha}"],
        regex: r"\{SHA\}([A-Za-z0-9+/]{27}=)(?:[^A-Za-z0-9+/=]|$)", group: 1, validator: None },
    D { id: "pgpass_password", description: "The password of a PostgreSQL password file line (host:port:database:user:password) on the default port or any",
        keywords: &[":5432:", ":*:"],
        regex: r"(?m)^[ \t]*(?:[A-Za-z0-9.\-]+|\*):(?:5432|\*):[^:\s]+:[^:\s]+:([^\s]+?)[ \t]*\r?$", group: 1, validator: Some(Validator::SecretLike) },
    // A JSON Web Key written as code (`{kty: 'oct', k: '…'}`, a Python dict, a log line):
    // its private members, in text that names a key type. JSON documents are read member by
    // member instead (`walk`), where the object, not the text, must name it.
    D { id: "jwk_private_key", description: "Private member of a JSON Web Key (k, d, p, q, dp, dq, qi) in text naming a key type (kty)",
        keywords: &["kty"],
        regex: r#"(?:^|[^A-Za-z0-9_$.\-])["']?(?:k|d|p|q|dp|dq|qi)["']?\s*(?::|=>?)\s*["'`]([A-Za-z0-9_\-]{16,})["'`]"#, group: 1, validator: None },
    D { id: "basic_auth_credentials", description: "Basic credential that decodes to user:password",
        keywords: &["basic"],
        regex: r"(?i)(?-u:\b)basic\s+([A-Za-z0-9+/]{6,}={0,2})", group: 1, validator: Some(Validator::BasicAuth) },
    D { id: "url_userinfo_password", description: "Password in a URL's userinfo (scheme://user:password@host)",
        keywords: &["://"],
        // The user may be an e-mail address with its `@` unescaped (`smtps://me@mail.example:pw@smtp…`),
        // or empty: Redis's password alone (`redis://:pw@host`).
        regex: r#"(?i)(?-u:\b)[a-z][a-z0-9+.\-]*://(?:[^\s:/@"'<>]+(?:@[^\s:/@"'<>]+)?)?:([^\s/@"'<>]+)@"#, group: 1, validator: None },
    D { id: "connection_string_password", description: "Password in a key=value connection string (Password=…;)",
        keywords: &["password=", "pwd=", "password =", "pwd ="],
        // Either after a `;` (one pair of several), or unspaced and ended by `;`: code's
        // `pwd = os.getcwd()` and `password = pass;` are judged by key context instead.
        regex: r#"(?i);[ \t]*(?:password|pwd)[ \t]*=[ \t]*([^;\s"']+)|(?:^|[\s"'])(?:password|pwd)=([^;\s"'()]+);"#, group: 1, validator: None },
    D { id: "powershell_plaintext_secure_string", description: "Literal string turned into a SecureString in PowerShell (ConvertTo-SecureString \"…\" -AsPlainText, or a bare literal after its switches)",
        keywords: &["convertto-securestring"],
        // The literal is the first argument that is not a switch, a `$variable` or a `(…)`
        // expression, quoted or bare; without -AsPlainText it is an encrypted standard
        // string, which opens with the same key and is removed too. A bare literal holds
        // something besides letters, so prose ("ConvertTo-SecureString to make…") stays.
        regex: r#"(?i)ConvertTo-SecureString(?:\s+-(?:String|AsPlainText|Force)(?-u:\b))*\s+(?:["']([^"'\r\n]+)["']|([A-Za-z]*[^A-Za-z\s"'$(\-|;.,][^\s|;]*))"#, group: 1, validator: None },
    D { id: "curl_user_credentials", description: "Credentials on a curl command line (-u user:pass, --user)",
        keywords: &["-u", "--user"],
        regex: r#"(?:^|\s)(?:-u|--user)[\s=]+["']?[^\s:"']*:([^\s"']+)"#, group: 1, validator: Some(Validator::SecretLike) },
    D { id: "cli_secret_flag", description: "Secret passed as a command-line flag (--password=, --token …)",
        keywords: &["-pass", "-pwd", "-token", "-secret", "-api-key", "-apikey", "-access-key", "-auth", "-account-key"],
        regex: r#"(?i)(?:^|\s)--?(?:password|passwd|pass|pwd|token|secret|client-secret|api-key|apikey|access-key|account-key|sas-token|auth-token)(?:=|\s+)["']?([^\s"']{3,})"#, group: 1, validator: None },
    // `-p` is a port or a path to most commands: only after the clients that read a password
    // there. mysql's takes it attached (`-p` alone prompts); a login's and sshpass's after a
    // blank too.
    D { id: "cli_password_short_flag", description: "Password after the -p flag of mysql, mariadb, docker/podman/nerdctl login or sshpass",
        // The container tools' names, not `login`: `"login"` is a JSON key in every other
        // user record, and flagged this regex on each (2% of protect's instructions on
        // order records).
        keywords: &["mysql", "mariadb", "docker", "podman", "nerdctl", "sshpass"],
        regex: r#"(?:(?-u:\b)(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)(?-u:\b)[^\n|;&]*?\s["']?-p|(?-u:\b)(?:docker|podman|nerdctl)\s+login(?-u:\b)[^\n|;&]*?\s-p\s+|(?-u:\b)sshpass\s+-p\s*)["']?([^\s"'\-][^\s"']*)"#, group: 1, validator: None },
    // Positional passwords: where the command or call takes a user then a password, the word
    // after the user is the password. Each alternative has its own group.
    D { id: "cli_password_client_flag", description: "Password after the flag a client reads it from: redis-cli -a, keytool -storepass/-keypass, zip -P, 7z -p, sqlcmd/bcp -P, ldapsearch/ldapmodify -w, ssh-keygen -N/-P, az login -p, psexec -p, xfreerdp /p:, smbclient -U user%password, lftp -u user,password, mosquitto_pub/sub -P, openssl enc -k, sqlplus user/password",
        // `zip ` and `7z `, not `zip`: a postal code's key (`"zip": "94107"`) is common in
        // the JSON agents send, and each hit would run this rule's regex on its value.
        keywords: &["redis-cli", "keytool", "zip ", "7z ", "7za ", "sqlcmd", "bcp ", "osql", "isql", "ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldappasswd", "ldapcompare", "ldapmodrdn", "ldapwhoami", "ssh-keygen", "az login", "psexec", "xfreerdp", "smbclient", "lftp", "mosquitto_", "openssl", "sqlplus"],
        // One alternative, and one group, per client, its name where a command starts (not
        // `data.zip` or `a.7z`); the span to its flag ends at `|` `;` `&` `>`, and at quotes
        // and commas but for ldap's, whose DN holds them. The flag's value up to a blank or
        // a quote. `-N ''` (no passphrase) and prompts (`-p` alone) leave nothing to take.
        regex: r#"(?:^|[\s;&|(`"'])redis-cli(?:\s[^\n|;&",>]*?)?\s-a\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])keytool(?:\s[^\n|;&",>]*?)?\s-(?:src|dest|new)?(?:store|key)?pass\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])zip(?:\s[^\n|;&",>]*?)?\s-P\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])7za?(?:\s[^\n|;&",>]*?)?\s-p["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])(?:sqlcmd|bcp|osql|isql)(?:\s[^\n|;&",>]*?)?\s-P\s*["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])ldap(?:search|add|modify|delete|passwd|compare|modrdn|whoami)(?:\s[^\n|;&>]*?)?\s-w\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])ssh-keygen(?:\s[^\n|;&",>]*?)?\s-[NP]\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])az\s+login(?:\s[^\n|;&",>]*?)?\s(?:-p|--password)(?:\s+|=)["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])psexec(?:64)?(?:\s[^\n|;&",>]*?)?\s-p\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])xfreerdp(?:\s[^\n|;&",>]*?)?\s/p:["']?([^\s"']+)|(?:^|[\s;&|(`"'])smbclient(?:\s[^\n|;&",>]*?)?\s(?:-U\s*|--user[=\s]+)["']?[^\s%"']+%([^\s"']+)|(?:^|[\s;&|(`"'])lftp(?:\s[^\n|;&",>]*?)?\s-u\s+["']?[^\s,"']+,([^\s"']+)|(?:^|[\s;&|(`"'])mosquitto_(?:pub|sub|rr)(?:\s[^\n|;&",>]*?)?\s-P\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])openssl\s+(?:enc|aes-\S+|des\S*|bf\S*|camellia\S*|chacha\S*)(?:\s[^\n|;&",>]*?)?\s-k\s+["']?([^\s"'\-][^\s"']*)|(?:^|[\s;&|(`"'])sqlplus\s+(?:-\S+\s+)*["']?[A-Za-z][A-Za-z0-9_$#]*/([^\s@"'/][^\s@"']*)["']?(?:@|\s|$)"#, group: 1, validator: Some(Validator::SecretLike) },
    D { id: "cli_password_positional", description: "Password given by position on a command line: htpasswd -b FILE USER PASSWORD, net user NAME PASSWORD, echo PASSWORD piped to sudo -S, echo USER:PASSWORD piped to chpasswd, rabbitmqctl add_user/change_password USER PASSWORD, mc alias set ALIAS URL ACCESS SECRET, a password echoed or fed (<<<) to a command's --password-stdin, --pw-stdin or passwd --stdin, openssl passwd PASSWORD",
        keywords: &["htpasswd", "net user", "sudo", "chpasswd", "rabbitmqctl", "mc alias", "mc config", "-stdin", "openssl passwd"],
        // `net user` only where the password ends the command (maybe with /switches after
        // it): "the net user growth was strong" is a sentence.
        regex: r#"(?-u:\b)htpasswd\s+(?:-[A-Za-mo-z]*b[A-Za-mo-z]*\s+(?:-\S+\s+)*\S+|-[A-Za-z]*(?:n[A-Za-z]*b|b[A-Za-z]*n)[A-Za-z]*)\s+\S+\s+["']?([^\s"']+)|(?i:(?-u:\b)net\s+user)\s+(?:"[^"\n]+"|[^\s/"]+)\s+["']?([^\s"'/*][^\s"']*)["']?(?:\s+/\w+(?::\S*)?)*[ \t]*(?:$|\r?\n|[;&|])|(?-u:\b)echo\s+["']?([^\s"'|$][^\s"'|]*)["']?\s*\|\s*sudo\s+(?:-[A-Za-z]+\s+)*?-[A-Za-z]*S(?-u:\b)|(?-u:\b)echo\s+["']?[^\s:"'|$]+:([^\s"'|]+)["']?\s*\|\s*(?:sudo\s+)?chpasswd(?-u:\b)|(?-u:\b)rabbitmqctl\s+(?:add_user|change_password)\s+["']?[^\s"']+["']?\s+["']?([^\s"'\-][^\s"']*)|(?-u:\b)(?:echo|printf\s+["']%s(?:\\n)?["'])\s+["']?([^\s"'|$][^\s"'|]*)["']?\s*\|\s*[^\n|;&]*?(?:\s--password-stdin|\s--pw-stdin|(?-u:\b)passwd\s+--stdin)(?-u:\b)|\s(?:--password-stdin|--pw-stdin)(?:\s[^\n|;&<]*?)?\s*<<<\s*["']?([^\s"'$][^\s"']*)|(?-u:\b)openssl\s+passwd\s+(?:-(?:1|5|6|apr1|crypt|aixmd5|stdin|quiet|table|noverify)\s+|-salt\s+\S+\s+)*["']?([^\s"'\-$<][^\s"'<]*)|(?-u:\b)mc\s+(?:alias\s+set|config\s+host\s+add)\s+(?:--?[a-z\-]+(?:[= ][^\s\-]\S*)?\s+)*[^\s"'\-]\S*\s+[a-z][a-z0-9+.\-]*://\S+\s+["']?[^\s"']+["']?\s+["']?([^\s"'\-][^\s"']*)"#, group: 1, validator: Some(Validator::SecretLike) },
    D { id: "call_positional_password", description: "Password passed by position to a call that takes a user and a password: getConnection(url, user, password), mysqli_connect(host, user, password), .login(user, password) of a mail, FTP or database client, NetworkCredential, UsernamePasswordCredentials, PasswordAuthentication, an LDAP simple_bind(dn, password), new PDO(dsn, user, password)",
        keywords: &["getconnection", "_connect", "login(", "credential(", "credentials(", "passwordauthentication", "bind_s(", "simple_bind(", "pdo("],
        regex: r#"(?:(?-u:\b)(?:getConnection|PDO)\s*\(\s*[^,()\n]+,|(?-u:\b)simple_bind(?:_s)?\s*\(|(?-u:\b)mysqli?_connect\s*\(\s*(?:"[^"\n]*"|'[^'\n]*'|\$?[A-Za-z0-9_]+)\s*,|(?-u:\b)(?:NetworkCredential|UsernamePasswordCredentials|PasswordAuthentication)\s*\(|(?-u:\b)[A-Za-z0-9_]*(?i:ftp|smtp|imap|pop3?|mail|server|conn|client|session|srv)[A-Za-z0-9_]*\.login\s*\()\s*(?:"[^"\s/]*"|'[^'\s/]*')\s*,\s*["']([^"'\s]+)["']"#, group: 1, validator: Some(Validator::SecretLike) },
    D { id: "go_sql_dsn_password", description: "Password in a Go database DSN (user:password@tcp(host)/db, @unix(…))",
        keywords: &["@tcp(", "@unix(", "@udp("],
        regex: r#"(?:^|[\s"'`=(])[^\s:"'`/@()]+:([^\s@"'`/]+)@(?:tcp|unix|udp)\("#, group: 1, validator: Some(Validator::SecretLike) },
    D { id: "one_time_code", description: "One-time code of 4 to 8 digits after the words that name one (verification code, one-time code, 2FA or MFA code, login code, OTP, passcode)",
        keywords: &["verification code", "verification pin", "one-time code", "one time code", "one-time pin", "one time pin", "2fa code", "2fa pin", "mfa code", "mfa pin", "security code", "security pin", "login code", "login pin", "two-factor code", "two factor code", "sign-in code", "confirmation code", "authentication code", "otp", "passcode"],
        regex: r"(?i)(?-u:\b)(?:(?:verification|one[- ]time|2fa|mfa|security|login)[ \t\r\n](?:code|pin)|(?:two[- ]factor|sign-in|confirmation|authentication)[ \t\r\n]code|otp|passcode)(?-u:\b)[^A-Za-z0-9_\n]{0,3}(?:(?:is|was)[^A-Za-z0-9_\n]{1,3})?([0-9]{4,8}|[0-9]{3}[ -][0-9]{3})(?:[^A-Za-z0-9_\-.]|\.(?:[^0-9]|$)|$)", group: 1, validator: Some(Validator::NotTrivial) },
    D { id: "account_recovery_codes", description: "Recovery or backup codes after the words that name them, the whole list (8 digits, GitHub's 5-5 hex, or 4-5 capitals and digits in 4 to 7 groups)",
        keywords: &["recovery code", "backup code", "recovery key"],
        regex: r"(?i)(?-u:\b)(?:recovery|backup)[ -](?:codes?|key)(?-u:\b)[^A-Za-z0-9_\n]{0,3}(?:(?:is|are|was|were)[^A-Za-z0-9_\n]{1,3})?(?:\n[ \t\r\n]*(?:[-*][ \t\r\n]+|[0-9]{1,2}[.)][ \t\r\n]+)?)?((?:[0-9]{4}[ -]?[0-9]{4}|[0-9a-f]{5}-[0-9a-f]{5}|(?-i:[A-Z0-9]{4,5}(?:-[A-Z0-9]{4,5}){3,6}))(?:[ \t]*[,;]?[ \t\r\n]+(?:[-*][ \t\r\n]+|[0-9]{1,2}[.)][ \t\r\n]+)?(?:[0-9]{4}[ -]?[0-9]{4}|[0-9a-f]{5}-[0-9a-f]{5}|(?-i:[A-Z0-9]{4,5}(?:-[A-Z0-9]{4,5}){3,6})))*)(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "url_secret_query_param", description: "Secret in a URL query parameter (token=, sig=, code=, key=, …)",
        keywords: &["token=", "sig=", "signature=", "code=", "key=", "secret=", "password=", "auth=", "credential="],
        regex: r#"(?i)[?&](?:token|access_token|refresh_token|id_token|api_key|apikey|key|sig|signature|x-amz-signature|x-amz-credential|code|secret|client_secret|password|auth|credential)=([^&#\s"'<>]{4,})"#, group: 1, validator: None },
    D { id: "secret_key_assignment", description: "Literal value under a credential name in code, config, JSON, YAML, .env, XML, command lines, SQL or cookies, judged by key and shape together (key context)",
        // Its keywords are `key_context::keywords()` (the password labels are derived from
        // a list), set in `default_detectors`.
        keywords: &[],
        // Not run: the judgment reads the text around the keyword hits. The spec's regex is
        // built from the keywords (`default_detectors`) so the combined set still says when
        // the detector may fire.
        regex: "", group: 0, validator: None },
    D { id: "high_entropy_near_keyword", description: "High-entropy string (over 4.2 bits/char, so not hex) near secret/token/credential/api key/private key",
        keywords: &["secret", "token", "credential", "apikey", "api_key", "api-key", "privatekey", "private_key", "accesskey", "access_key"],
        regex: r"(?i)(?:secret|token|credential|api[_\-]?key|private[_\-]?key|access[_\-]?key)[^\n]{0,24}?(?:^|[^A-Za-z0-9+/_\-])([A-Za-z0-9+/_\-]{24,}={0,2})", group: 1, validator: ENTROPY_4_2 },
    // --- Personal data -----------------------------------------------------------------------
    D { id: "email_address", description: "E-mail address",
        keywords: &["@"],
        regex: r"(?:^|[^A-Za-z0-9._%+\-])([A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24})(?:[^A-Za-z0-9]|$)", group: 1, validator: None },
    D { id: "phone_number_international", description: "Phone number in international form (+CC …)",
        keywords: &[],
        regex: r"(?:^|[^\w+])(\+[1-9]\d{0,2}[\s.\-]?(?:\(\d{1,4}\)[\s.\-]?)?\d{1,4}(?:[\s.\-]?\d{2,5}){1,4})(?:[^\w]|$)", group: 1, validator: Some(Validator::PhoneDigits) },
    D { id: "phone_number_north_american", description: "North American phone number ((415) 555-0132, 415-555-0132, 415.555.0132)",
        keywords: &[],
        regex: r#"(?:^|[^\w+\-.])((?:1[\s.\-])?(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.\-])[2-9]\d{2}[\s.\-]\d{4})(?:[^\w\-.]|\.(?:[\s"]|$)|$)"#, group: 1, validator: None },
    D { id: "phone_number_in_context", description: "Phone number in national form after a phone word (tel, mobile, call me at, fax…)",
        keywords: &["phone", "tel", "mobile", "cell", "fax", "call", "whatsapp", "sms", "dial"],
        regex: r"(?i)(?-u:\b)(?:phone|tel|telephone|mobile|cell|fax|call(?:\s+me)?(?:\s+(?:at|on))?|whatsapp|sms|dial)(?-u:\b)[^\d\n+(]{0,20}((?:\+\d{1,3}[\s.\-]?)?(?:\(\d{1,4}\)[\s.\-]?)?\d{2,5}(?:[\s.\-]?\d{2,5}){1,4}(?:\s?x\d{1,5})?)(?:[^\w]|$)", group: 1, validator: Some(Validator::PhoneDigits7) },
    D { id: "payment_card_number", description: "Payment card number (13-19 digits, Luhn-valid, issuer prefix)",
        keywords: &[],
        regex: r"(?:^|[^0-9A-Za-z\-.])([2-6][0-9]{3}(?:[ \-]?[0-9]{4}){2}[ \-]?[0-9]{1,4}(?:[ \-]?[0-9]{1,3})?)(?:[^0-9A-Za-z\-.]|$)", group: 1, validator: Some(Validator::Luhn) },
    D { id: "iban", description: "International bank account number (mod-97-valid)",
        keywords: &[],
        regex: r"(?:^|[^A-Za-z0-9])([A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})(?:[^A-Za-z0-9]|$)", group: 1, validator: Some(Validator::IbanMod97) },
    D { id: "us_social_security_number", description: "US social security number (AAA-GG-SSSS, issued ranges)",
        keywords: &[],
        regex: r"(?:^|[^\d\-])(\d{3}-\d{2}-\d{4})(?:[^\d\-]|$)", group: 1, validator: Some(Validator::UsSsn) },
    D { id: "ipv4_address", description: "IPv4 address (not a longer dotted version string; not loopback, unspecified, broadcast or documentation)",
        keywords: &[],
        regex: r#"(?:^|[^\w.])((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})(?:[^\w.]|\.(?:[\s"]|$)|$)"#, group: 1, validator: Some(Validator::Ipv4) },
    D { id: "ipv6_address", description: "IPv6 address (full, or compressed with at least two groups; not loopback or documentation)",
        keywords: &[],
        regex: r"(?:^|[^\w:])((?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|(?:[0-9a-fA-F]{1,4}:){2,6}:(?:[0-9a-fA-F]{1,4}:){0,5}[0-9a-fA-F]{1,4})(?:[^\w:]|$)", group: 1, validator: Some(Validator::Ipv6) },
];

/// Rules for personal data: a repeated digit there is still a number, not a placeholder.
pub const PERSONAL_DATA: &[&str] = &[
    "email_address",
    "phone_number_international",
    "phone_number_north_american",
    "phone_number_in_context",
    "payment_card_number",
    "iban",
    "us_social_security_number",
    "ipv4_address",
    "ipv6_address",
];

/// The detectors whose regex is one alternative per shape, each shape's password its own
/// capture group.
const ALTERNATIVES: &[&str] = &[
    "connection_string_password",
    "powershell_plaintext_secure_string",
    "cli_password_positional",
    "cli_password_client_flag",
];

/// The capture groups `regex` names (its groups less the whole match).
fn capture_groups(regex: &str) -> usize {
    regex_syntax::Parser::new()
        .parse(regex)
        .map_or(1, |h| h.properties().explicit_captures_len())
}

/// The detector that is the key-context judgment.
const JUDGED_DETECTOR: &str = "secret_key_assignment";

/// The run of token characters the built-in detector `id` cannot match without, when its
/// regex is still the catalogue's: `high_entropy_near_keyword` takes 24 or more
/// (`[A-Za-z0-9+/_\-]{24,}`), and the keywords it waits for (`token`, `secret`) are common
/// words of model text that holds no such run.
pub fn min_token_run(id: &str, regex: &str) -> usize {
    match id {
        "high_entropy_near_keyword" if DETECTORS.iter().any(|d| d.id == id && d.regex == regex) => {
            super::validators::TOKEN_RUN_BYTES
        }
        _ => 0,
    }
}

/// The default detectors as specs.
pub fn default_detectors() -> Vec<DetectorSpec> {
    DETECTORS
        .iter()
        .map(|d| DetectorSpec {
            id: d.id.to_string(),
            description: d.description.to_string(),
            regex: if d.id == JUDGED_DETECTOR {
                let words: Vec<String> = super::key_context::keywords()
                    .iter()
                    .map(|k| regex::escape(k))
                    .collect();
                format!("(?i){}", words.join("|"))
            } else {
                d.regex.to_string()
            },
            keywords: if d.id == JUDGED_DETECTOR {
                super::key_context::keywords().to_vec()
            } else {
                d.keywords.iter().map(|k| k.to_string()).collect()
            },
            group: d.group,
            // One rule, several shapes of the same password, each with its own group: every
            // group after the first is an alternative.
            alternate_groups: if ALTERNATIVES.contains(&d.id) {
                (2..=capture_groups(d.regex)).collect()
            } else {
                Vec::new()
            },
            validator: d.validator,
            action: Action::Mask,
            signals: Vec::new(),
            keys: Vec::new(),
            except_keys: Vec::new(),
            except_context: Vec::new(),
            judged: d.id == JUDGED_DETECTOR,
            gate: super::shape::ShapeGate::of_detector(d.id),
            // Key-context values are checked by their own validator, which keeps `1234…` runs.
            skip_placeholders: !PERSONAL_DATA.contains(&d.id) && d.id != "secret_key_assignment",
            min_digits: match d.id {
                "payment_card_number" => 12,
                "phone_number_north_american" => 10,
                "phone_number_international" => 8,
                "phone_number_in_context" => 7,
                "us_social_security_number" => 9,
                "iban" => 4,
                "ipv4_address" => 4,
                _ => 0,
            },
        })
        .collect()
}

/// Keys whose whole value is a credential, whatever it looks like; then keys that hold a
/// credential when the value looks like one (a single non-trivial token).
pub fn default_key_rules() -> Vec<KeyRuleSpec> {
    vec![
        KeyRuleSpec {
            id: "credential_key".into(),
            description: "Attribute or JSON key that names a credential (password, secret, token, authorization, API key…), judged with its value (key context)".into(),
            keys: Vec::new(),
            except_keys: Vec::new(),
            action: Action::Mask,
            keep_bytes: 256,
            when: None,
            judged: Some(KeyClass::Credential),
        },
        KeyRuleSpec {
            id: "secret_named_key".into(),
            description: "Attribute or JSON key that names secret material (nonce, salt, session, cookie, a qualified or plain key), judged with its value (key context)".into(),
            keys: Vec::new(),
            except_keys: Vec::new(),
            action: Action::Mask,
            keep_bytes: 256,
            when: None,
            judged: Some(KeyClass::Material),
        },
    ]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protect::engine::Redactor;
    use crate::protect::rules::RedactionConfig;
    use crate::protect::KeyedHasher;

    fn redactor() -> Redactor {
        Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"test")).expect("compiles")
    }

    /// `n` characters cycling through `alphabet`, so lengths are exact.
    fn cycle(alphabet: &str, n: usize) -> String {
        alphabet.chars().cycle().take(n).collect()
    }

    const B62: &str = "aZ3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jK";

    /// (rule, text, the substring that must be found under that rule)
    pub(crate) fn true_positives() -> Vec<(&'static str, String, String)> {
        let mut v: Vec<(&'static str, String, String)> = Vec::new();
        let mut tp =
            |rule: &'static str, text: String, secret: String| v.push((rule, text, secret));
        let s = |x: &str| x.to_string();
        tp(
            "aws_access_key_id",
            s("aws_access_key_id=AKIAT3STONLYN0TREAL7"),
            s("AKIAT3STONLYN0TREAL7"),
        );
        tp(
            "aws_access_key_id",
            s("{\"key\":\"ASIAY34FZKBOKMUTVV7A\"}"),
            s("ASIAY34FZKBOKMUTVV7A"),
        );
        tp(
            "aws_secret_access_key",
            s("aws_secret_access_key = \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYT3stOnlyK3\""),
            s("wJalrXUtnFEMI/K7MDENG/bPxRfiCYT3stOnlyK3"),
        );
        let bedrock = format!("ABSK{}", cycle("QmVkcm9ja0FQSUtleS1hYmNk", 120));
        tp("aws_bedrock_api_key", format!("key {bedrock}"), bedrock);
        let gcp = format!("AIza{}", cycle(B62, 35));
        tp(
            "gcp_api_key",
            format!("https://maps.googleapis.com/?key={gcp}&x=1"),
            gcp,
        );
        tp("gcp_service_account_private_key_id", s("{\"type\":\"service_account\",\"private_key_id\": \"3f1e5c7a9b2d4f6e8a0c1b3d5f7e9a2c4b6d8f0e\"}"), s("3f1e5c7a9b2d4f6e8a0c1b3d5f7e9a2c4b6d8f0e"));
        let azkey = format!("{}==", cycle("Zm9vYmFyYmF6cXV4", 86));
        tp("azure_storage_account_key", format!("DefaultEndpointsProtocol=https;AccountName=x;AccountKey={azkey};EndpointSuffix=core.windows.net"), azkey);
        let identifiable = format!(
            "{}JQQJ99{}AZDO{}",
            cycle("7q4Xb2Lm9KpR3tVw", 52),
            cycle("ALACAAAAAAAAAAAAAS", 18),
            cycle("Hd8k", 4)
        );
        tp(
            "azure_identifiable_key",
            format!("devops {identifiable} expires"),
            identifiable.clone(),
        );
        let storage = format!(
            "{}JQQJ99{}+ASt{}==",
            cycle("Zm9vYmFy", 52),
            cycle("Ab3", 18),
            cycle("q8", 6)
        );
        tp("azure_identifiable_key", format!("key1={storage}"), storage);
        tp(
            "jwk_private_key",
            s("const jwk = { kty: 'oct', alg: 'HS256', k: 'GawgguFyGrWKav7AX4VKUg' };"),
            s("GawgguFyGrWKav7AX4VKUg"),
        );
        tp(
            "jwk_private_key",
            s("key = {'kty': 'EC', 'crv': 'P-256', 'x': 'f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU', 'd': 'jpsQnnGQmL-YBIffH1136cLyG7rk8W0xZD3Y5nM0a1Y'}"),
            s("jpsQnnGQmL-YBIffH1136cLyG7rk8W0xZD3Y5nM0a1Y"),
        );
        tp(
            "azure_ad_client_secret",
            s("client secret: abc8Q~Zk3q9XbT2mLw8RvNc1dF5gH0jKaZ3kQ9m"),
            s("abc8Q~Zk3q9XbT2mLw8RvNc1dF5gH0jKaZ3kQ9m"),
        );
        let dop = format!("dop_v1_{}", cycle("3f9a1c7e5b2d8046", 64));
        tp("digitalocean_token", format!("DO_TOKEN {dop}"), dop);
        let hrku = format!("HRKU-AA{}", cycle(B62, 58));
        tp("heroku_api_key", format!("heroku: {hrku}"), hrku);
        let cf = format!(
            "v1.0-{}-{}",
            cycle("0a1b2c3d4e5f", 24),
            cycle("9f8e7d6c5b4a", 146)
        );
        tp("cloudflare_origin_ca_key", format!("origin_ca {cf}"), cf);
        tp(
            "github_token",
            format!("token {}", valid_github("ghp_")),
            valid_github("ghp_"),
        );
        let gh = format!("ghp_{}", cycle(B62, 36));
        tp("github_token_unverified", format!("GITHUB_TOKEN: {gh}"), gh);
        let ghf = format!("github_pat_{}", cycle("11AQZK3R0_m9XbT2wLp7", 82));
        tp("github_fine_grained_pat", format!("use {ghf} here"), ghf);
        let gl = format!("glpat-{}", cycle(B62, 20));
        tp("gitlab_token", format!("PRIVATE-TOKEN: {gl}"), gl);
        tp(
            "npm_token",
            format!("//registry.npmjs.org/:_authToken={}", valid_github("npm_")),
            valid_github("npm_"),
        );
        let npm = format!("npm_{}", cycle(B62, 36));
        tp("npm_token_unverified", format!("token {npm}"), npm);
        let pypi = format!("pypi-AgEIcHlwaS5vcmc{}", cycle(B62, 60));
        tp("pypi_token", format!("password = {pypi}"), pypi);
        let atl = format!("ATATT{}", cycle(B62, 190));
        tp("atlassian_api_token", format!("jira {atl}"), atl);
        let tf = format!("{}.atlasv1.{}", cycle(B62, 14), cycle(B62, 65));
        tp("hashicorp_token", format!("credentials {tf}"), tf);
        let vault = format!("hvs.{}", cycle(B62, 90));
        tp("hashicorp_token", format!("VAULT {vault}"), vault);
        let dckr = format!("dckr_pat_{}", cycle(B62, 27));
        tp("docker_pat", format!("docker login -p {dckr}"), dckr);
        let oai = format!("sk-proj-{}", cycle(B62, 120));
        tp("openai_api_key", format!("{{\"api_key\": \"{oai}\"}}"), oai);
        let oai_old = format!("sk-{}T3BlbkFJ{}", cycle(B62, 20), cycle(B62, 20));
        tp("openai_api_key", format!("OPENAI {oai_old}"), oai_old);
        let ant = format!("sk-ant-api03-{}", cycle(B62, 95));
        tp("anthropic_api_key", format!("x-api {ant}"), ant);
        let hf = format!("hf_{}", cycle("aZkQmXpLvRtYwNbCdFgHjK", 34));
        tp("huggingface_token", format!("HF {hf}"), hf);
        let gsk = format!("gsk_{}", cycle(B62, 52));
        tp("groq_api_key", format!("groq {gsk}"), gsk);
        let pplx = format!("pplx-{}", cycle(B62, 48));
        tp("perplexity_api_key", format!("key {pplx}"), pplx);
        let r8 = format!("r8_{}", cycle(B62, 37));
        tp("replicate_api_token", format!("replicate {r8}"), r8);
        let sk = format!("sk_live_{}", cycle(B62, 24));
        tp("stripe_key", format!("Stripe.api_key = '{sk}'"), sk);
        let wh = format!("whsec_{}", cycle(B62, 32));
        tp("stripe_webhook_secret", format!("endpoint {wh}"), wh);
        let sq = format!("sq0atp-{}", cycle(B62, 22));
        tp("square_token", format!("square {sq}"), sq);
        let bt = format!(
            "access_token$production${}${}",
            cycle("abc123", 16),
            cycle("3f9a1c7e5b2d8046", 32)
        );
        tp("braintree_access_token", format!("braintree {bt}"), bt);
        tp(
            "slack_token",
            s("SLACK_BOT xoxb-2401234567-2409876543210-AbCdEfGhIjKlMnOpQrStUvWx"),
            s("xoxb-2401234567-2409876543210-AbCdEfGhIjKlMnOpQrStUvWx"),
        );
        tp("slack_webhook_url", s("post to https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/AbCdEfGhIjKlMnOpQrStUvWx now"), s("https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/AbCdEfGhIjKlMnOpQrStUvWx"));
        let dw = format!(
            "https://discord.com/api/webhooks/981726354091827364/{}",
            cycle(B62, 68)
        );
        tp("discord_webhook_url", format!("hook: {dw}"), dw);
        tp(
            "zapier_webhook_url",
            s("WEBHOOK_URL=https://hooks.zapier.com/hooks/catch/123456/abcdef9/"),
            s("https://hooks.zapier.com/hooks/catch/123456/abcdef9/"),
        );
        tp("teams_webhook_url", s("https://contoso.webhook.office.com/webhookb2/abc@def/IncomingWebhook/0123abcd/ef45"), s("https://contoso.webhook.office.com/webhookb2/abc@def/IncomingWebhook/0123abcd/ef45"));
        let tg = format!("123456789:AA{}", cycle(B62, 33));
        tp("telegram_bot_token", format!("bot{tg}/sendMessage"), tg);
        let sg = format!("SG.{}.{}", cycle(B62, 22), cycle(B62, 43));
        tp("sendgrid_api_key", format!("sendgrid {sg}"), sg);
        tp(
            "twilio_api_key",
            s("twilio SK3f9a1c7e5b2d80463f9a1c7e5b2d8046"),
            s("SK3f9a1c7e5b2d80463f9a1c7e5b2d8046"),
        );
        tp(
            "mailchimp_api_key",
            s("mc 3f9a1c7e5b2d80463f9a1c7e5b2d8046-us21"),
            s("3f9a1c7e5b2d80463f9a1c7e5b2d8046-us21"),
        );
        tp(
            "shopify_token",
            s("shop 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"),
            s("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"),
        );
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        tp("jwt", format!("token={jwt}"), s(jwt));
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----";
        tp("private_key", format!("key:\n{pem}\n"), s(pem));
        let cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW";
        tp("private_key", s(cut), s(cut));
        let pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0ZAQwAu1SU1LfVLPHCozMx\n-----END PGP PRIVATE KEY BLOCK-----";
        tp("private_key", s(pgp), s(pgp));
        let putty = "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPrivate-Lines: 1\nAAAAIBx\nPrivate-MAC: 6e4c1d2f";
        tp("putty_private_key", s(putty), s(putty));
        tp(
            "bearer_token",
            s("Authorization: Bearer abcDEF123456.ghiJKL789-_x"),
            s("abcDEF123456.ghiJKL789-_x"),
        );
        tp(
            "basic_auth_credentials",
            s("Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l"),
            s("YWxhZGRpbjpvcGVuc2VzYW1l"),
        );
        tp(
            "url_userinfo_password",
            s("postgres://app:S3cr3tPw@db.internal:5432/orders"),
            s("S3cr3tPw"),
        );
        // Redis: the password alone, no user.
        tp(
            "url_userinfo_password",
            s("REDIS_URL=redis://:Xk9mQ2vL7w@cache.internal:6379/0"),
            s("Xk9mQ2vL7w"),
        );
        tp(
            "connection_string_password",
            s("Server=db;Database=x;User Id=sa;Password=Tr0ub4dor&3;"),
            s("Tr0ub4dor&3"),
        );
        tp(
            "connection_string_password",
            s("\"Password=Tr0ub4dor&3;Server=db;Database=x\""),
            s("Tr0ub4dor&3"),
        );
        tp(
            "curl_user_credentials",
            s("curl -u admin:hunter22 https://api.example.com"),
            s("hunter22"),
        );
        for (line, secret) in [
            ("mysql -u root -pXk9mQ2vL7w orders", "Xk9mQ2vL7w"),
            (
                "mysqldump -h db -u app '-pXk9mQ2vL7w' shop > shop.sql",
                "Xk9mQ2vL7w",
            ),
            (
                "docker login -u bob -p Xk9mQ2vL7w registry.example.com",
                "Xk9mQ2vL7w",
            ),
            (
                "podman login registry.example.com -u bob -p 'Xk9mQ2vL7w'",
                "Xk9mQ2vL7w",
            ),
            ("sshpass -p 'Xk9mQ2vL7w' ssh bob@host", "Xk9mQ2vL7w"),
            ("sshpass -pXk9mQ2vL7w scp a bob@host:", "Xk9mQ2vL7w"),
        ] {
            tp("cli_password_short_flag", s(line), s(secret));
        }
        for line in [
            "redis-cli -h cache -a Vd8kLm2Zqr ping",
            "redis-cli -a Vd8kLm2Zqr",
            "smbclient -U bob%Vd8kLm2Zqr //fs/share",
            "keytool -importkeystore -srckeystore a.jks -srcstorepass Vd8kLm2Zqr -deststorepass x",
            "keytool -genkeypair -keystore k.jks -storepass 'Vd8kLm2Zqr' -alias app",
            "zip -r -P Vd8kLm2Zqr backup.zip data",
            "7z a -pVd8kLm2Zqr backup.7z data",
            "sqlcmd -S db -U sa -P 'Vd8kLm2Zqr' -Q \"select 1\"",
            "ldapsearch -x -D \"cn=admin,dc=example,dc=com\" -w Vd8kLm2Zqr -b dc=example,dc=com",
            "ssh-keygen -t ed25519 -N 'Vd8kLm2Zqr' -f key",
            "az login -u bob@example.com -p Vd8kLm2Zqr",
            "psexec \\\\host -u admin -p Vd8kLm2Zqr cmd",
            "xfreerdp /v:host /u:admin /p:Vd8kLm2Zqr",
            "smbclient //fs/share -U bob%Vd8kLm2Zqr",
            "lftp -u bob,Vd8kLm2Zqr sftp://files.example.com",
        ] {
            tp("cli_password_client_flag", s(line), s("Vd8kLm2Zqr"));
        }
        for line in [
            "mosquitto_pub -h broker -u bob -P Vd8kLm2Zqr -t t -m hi",
            "echo \"bob:Vd8kLm2Zqr\" | chpasswd",
            "echo 'bob:Vd8kLm2Zqr' | sudo chpasswd",
            "rabbitmqctl add_user app Vd8kLm2Zqr",
            "rabbitmqctl change_password app 'Vd8kLm2Zqr'",
            "mc alias set myminio http://minio:9000 minioadmin Vd8kLm2Zqr",
            "mc alias set --api S3v4 s3 https://s3.amazonaws.com AKIAEXAMPLE 'Vd8kLm2Zqr'",
            "mc config host add backup https://minio.internal:9000 backup Vd8kLm2Zqr",
            "cd /srv && zip -r backup.zip data -P Vd8kLm2Zqr",
            "db, err := sql.Open(\"mysql\", \"app:Vd8kLm2Zqr@tcp(127.0.0.1:3306)/shop\")",
            "DSN=app:Vd8kLm2Zqr@unix(/var/run/mysqld/mysqld.sock)/shop",
        ] {
            let rule = if line.contains("mosquitto") || line.contains("zip") {
                "cli_password_client_flag"
            } else if line.contains("sql.Open") || line.contains("DSN=") {
                "go_sql_dsn_password"
            } else {
                "cli_password_positional"
            };
            tp(rule, s(line), s("Vd8kLm2Zqr"));
        }
        for (line, secret) in [
            (
                "htpasswd -b /etc/nginx/.htpasswd admin Vd8kLm2Zqr",
                "Vd8kLm2Zqr",
            ),
            ("htpasswd -bc .htpasswd admin 'Vd8kLm2Zqr'", "Vd8kLm2Zqr"),
            ("htpasswd -nb admin Vd8kLm2Zqr > users", "Vd8kLm2Zqr"),
            ("net user bob Pa55w0rdX /add", "Pa55w0rdX"),
            ("NET USER \"svc sql\" Pa55w0rdX /add /domain", "Pa55w0rdX"),
            ("net user bob Pa55w0rdX", "Pa55w0rdX"),
            ("echo 'Zq8!mP2xw' | sudo -S apt update", "Zq8!mP2xw"),
            (
                "echo Zq8mP2xwQ | sudo -k -S systemctl restart app",
                "Zq8mP2xwQ",
            ),
        ] {
            tp("cli_password_positional", s(line), s(secret));
        }
        for (line, secret) in [
            (
                "DriverManager.getConnection(url, \"scott\", \"Tiger4Lyf\")",
                "Tiger4Lyf",
            ),
            (
                "conn = DriverManager.getConnection(\"jdbc:mysql://db/shop\", \"root\", \"Tiger4Lyf\");",
                "Tiger4Lyf",
            ),
            ("$db = mysqli_connect($host, 'shop', 'Tiger4Lyf');", "Tiger4Lyf"),
            ("client.login(\"bob\", \"hunter2Qx\")", "hunter2Qx"),
            ("smtp.login('alerts@example.com', 'hunter2Qx')", "hunter2Qx"),
            (
                "new NetworkCredential(\"svc\", \"hunter2Qx\")",
                "hunter2Qx",
            ),
            (
                "new PasswordAuthentication(\"bob\", \"hunter2Qx\".toCharArray())",
                "hunter2Qx",
            ),
            (
                "l.simple_bind_s(\"cn=admin,dc=example,dc=org\", \"hunter2Qx\")",
                "hunter2Qx",
            ),
            ("$pdo = new PDO($dsn, 'root', 'hunter2Qx');", "hunter2Qx"),
        ] {
            tp("call_positional_password", s(line), s(secret));
        }
        tp(
            "aws_sigv4_signature",
            s("Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20261206/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"),
            s("fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"),
        );
        for (text, secret) in [
            (
                "bob:$6$rounds=5000$Zq8vLx2R$jK3mN9pQ2wX7vB4cT6yU1iO8aS5dF0gH3jK6lZ9xC2vB5nM8qW1eR4tY7uI0oP3aS6dF9gH2jK5lZ8xC1vB4n:19000:0:99999:7:::",
                "$6$rounds=5000$Zq8vLx2R$jK3mN9pQ2wX7vB4cT6yU1iO8aS5dF0gH3jK6lZ9xC2vB5nM8qW1eR4tY7uI0oP3aS6dF9gH2jK5lZ8xC1vB4n",
            ),
            (
                "INSERT INTO users VALUES (1, 'bob', '$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW');",
                "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW",
            ),
            (
                "root:$y$j9T$Zq8vLx2RkP$jK3mN9pQ2wX7vB4cT6yU1iO8aS5dF0gH3jK6lZ9xC2v:19000::::::",
                "$y$j9T$Zq8vLx2RkP$jK3mN9pQ2wX7vB4cT6yU1iO8aS5dF0gH3jK6lZ9xC2v",
            ),
            (
                "hash = \"$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG\"",
                "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG",
            ),
            (
                "admin:$apr1$Xk9mP2qL$Zr8kq2LmVx9wTz4Vb7Nc1/",
                "$apr1$Xk9mP2qL$Zr8kq2LmVx9wTz4Vb7Nc1/",
            ),
        ] {
            tp("crypt_password_hash", s(text), s(secret));
        }
        tp(
            "htpasswd_sha1",
            s("deploy:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g="),
            s("W6ph5Mm5Pz8GgiULbPgzG37mj9g="),
        );
        tp(
            "pgpass_password",
            s("$ cat ~/.pgpass\ndb.internal:5432:shop:app:Qw83nvLp2xR\n*:*:*:replicator:Zt7kQ2mXw9"),
            s("Qw83nvLp2xR"),
        );
        // Developer platforms' prefixed tokens, bare where a setting or a call holds them.
        for (rule, text, secret) in [
            ("aws_appsync_api_key", "const client = new AWSAppSyncClient({ apiKey: 'da2-k7wq3xz9m2fp5vn8rt4hy6bc1d' });", "da2-k7wq3xz9m2fp5vn8rt4hy6bc1d"),
            ("defined_networking_api_key", "dnclient enroll -code dnkey-QW3RT7YUP2LKJH6GF5DSA4ZXCV-BN7MQ2WE3RT4YU5IOP6ASD7FGH2JKL3ZXC4VBN5MQW6ERT7YUI2O", "dnkey-QW3RT7YUP2LKJH6GF5DSA4ZXCV-BN7MQ2WE3RT4YU5IOP6ASD7FGH2JKL3ZXC4VBN5MQW6ERT7YUI2O"),
            ("twitter_bearer_token", "curl -H \"Authorization: Bearer $T\" # T=AAAAAAAAAAAAAAAAAAAAAK3mQ9AAAAAAx7Lp2%2Bv4Rz8Nq1Ws5Ty3Ub6Hc9Jd2Fe4Gk7Ma0Pn3Qo5Rs8Tu1Vw4Xy6Za9Bc2De5Fg8Hi1Jk4Lm7No", "AAAAAAAAAAAAAAAAAAAAAK3mQ9AAAAAAx7Lp2%2Bv4Rz8Nq1Ws5Ty3Ub6Hc9Jd2Fe4Gk7Ma0Pn3Qo5Rs8Tu1Vw4Xy6Za9Bc2De5Fg8Hi1Jk4Lm7No"),
            ("akamai_edgegrid_token", "access_token = akab-q7w2e9r4t1y6u3i8-o5p0a2s7d4f9g1h6", "akab-q7w2e9r4t1y6u3i8-o5p0a2s7d4f9g1h6"),
            ("vercel_token", "deployed by vcp_8Kq2Zr7Wn4Xm1Vb6Nc3Lp9Hg5Fd2Sa8Qw7Er4Ty1Ui6Op3As0_Fx9Gm2", "vcp_8Kq2Zr7Wn4Xm1Vb6Nc3Lp9Hg5Fd2Sa8Qw7Er4Ty1Ui6Op3As0_Fx9Gm2"),
            ("posthog_personal_api_key", "POSTHOG_PROJECT_SECRET=phs_Vb7Nq2Wr9Xz4Lk1Mp6Hd3Jf8Gs5Tc0Ya7Ue2Io9Pw4Qr1Zx", "phs_Vb7Nq2Wr9Xz4Lk1Mp6Hd3Jf8Gs5Tc0Ya7Ue2Io9Pw4Qr1Zx"),
            ("posthog_personal_api_key", "Authorization: Bearer pha_T4kLp9Wq2Zr7Nx1Vb6Mc3Hd8Gf5Js0Ka2Ye7Uo9Ip4Qw1Er6Ty", "pha_T4kLp9Wq2Zr7Nx1Vb6Mc3Hd8Gf5Js0Ka2Ye7Uo9Ip4Qw1Er6Ty"),
            ("new_relic_key", "NEW_RELIC_LICENSE_KEY=4f9a2c7e1b8d3f6a0c5e9b2d7f4a1c8e3b6dNRAL", "4f9a2c7e1b8d3f6a0c5e9b2d7f4a1c8e3b6dNRAL"),
            ("new_relic_key", "admin key NRAA-7c2e9f4a1b8d3c6e0f5a2b7d4c9 rotated", "NRAA-7c2e9f4a1b8d3c6e0f5a2b7d4c9"),
            ("slack_token", "SLACK_APP_TOKEN=xapp-1-A07QX3KD9LM-7894561230123-3f9a1c7e5b2d80463f9a1c7e5b2d80463f9a1c7e5b2d80463f9a1c7e5b2d8046", "xapp-1-A07QX3KD9LM-7894561230123-3f9a1c7e5b2d80463f9a1c7e5b2d80463f9a1c7e5b2d80463f9a1c7e5b2d8046"),
            ("contentful_pat", "CONTENTFUL_MANAGEMENT_TOKEN=CFPAT-vdb9Z66Ys4faGOlprUPBxJrIeKA0FywWZz4pzkhGFSW", "CFPAT-vdb9Z66Ys4faGOlprUPBxJrIeKA0FywWZz4pzkhGFSW"),
            ("mapbox_secret_token", "mapboxgl.accessToken = 'sk.eyJ1IjoiYWNtZSIsImEiOiJjbHh5ejEyMzQifQ.nHslFTLuT4JkaMy5FiW4nA';", "sk.eyJ1IjoiYWNtZSIsImEiOiJjbHh5ejEyMzQifQ.nHslFTLuT4JkaMy5FiW4nA"),
            ("prefect_api_key", "prefect cloud login -k pnu_5xZn3F77UW8qNcpOGDPGsCUf2ptnKkleUpxB", "pnu_5xZn3F77UW8qNcpOGDPGsCUf2ptnKkleUpxB"),
            ("readme_api_key", "README_API_KEY: rdme_8byw5k8qfg3nowjil8f4rrsa8t9dtc5fyht0ylrumis21glhi3tt92ckyfdup5pwg1xjxw", "rdme_8byw5k8qfg3nowjil8f4rrsa8t9dtc5fyht0ylrumis21glhi3tt92ckyfdup5pwg1xjxw"),
            ("shippo_api_token", "Authorization: ShippoToken shippo_live_93edddc25b5028243e3f00d2dc5c3f7d07055cec", "shippo_live_93edddc25b5028243e3f00d2dc5c3f7d07055cec"),
            ("typeform_token", "config value = tfp_rHjOfV5SGAx2TZ996aBKMlG318aQuui3UGSS9m6gW1F2_fyofVtj6bokV6u", "tfp_rHjOfV5SGAx2TZ996aBKMlG318aQuui3UGSS9m6gW1F2_fyofVtj6bokV6u"),
            ("adafruit_io_key", "X-AIO-Key: aio_s82vz8rGVatzFBXjyfCJJUdUMubl", "aio_s82vz8rGVatzFBXjyfCJJUdUMubl"),
            ("duffel_token", "DUFFEL_ACCESS_TOKEN=duffel_test_kDDU3nS4YNvTj0JejI5MLnAO2vXzVRgOyUvl3BqJg4C", "duffel_test_kDDU3nS4YNvTj0JejI5MLnAO2vXzVRgOyUvl3BqJg4C"),
            ("easypost_api_key", "client = easypost.EasyPostClient(\"EZAKqtHQPxQhxQc70SZKKefmUQK8FEvwgGsWsXRwxPodCRdUFlVkhApDhE\")", "EZAKqtHQPxQhxQc70SZKKefmUQK8FEvwgGsWsXRwxPodCRdUFlVkhApDhE"),
            ("infracost_api_key", "infracost configure set api_key ico-Q8FiTOGGN8sQWc0pb7wqaYLmVYzxWXtQ", "ico-Q8FiTOGGN8sQWc0pb7wqaYLmVYzxWXtQ"),
            ("buildkite_token", "BUILDKITE_API_TOKEN=bkua_3292cf87f08437350fca8ab3b507014a000d6e54", "bkua_3292cf87f08437350fca8ab3b507014a000d6e54"),
            ("circleci_pat", "Circle-Token: CCIPAT_jPhFF4bS5mQa7HUe03xW4V_e88fa6e7b6b25abb37068debbdb257d9f864bf10", "CCIPAT_jPhFF4bS5mQa7HUe03xW4V_e88fa6e7b6b25abb37068debbdb257d9f864bf10"),
            ("neon_api_key", "neonctl --api-key napi_yogl8g4xwz2of2fc6r17ovto6j70p421ayxd0ni454z7evtv7amnld3z1ed91oit projects list", "napi_yogl8g4xwz2of2fc6r17ovto6j70p421ayxd0ni454z7evtv7amnld3z1ed91oit"),
            ("flyio_token", "FLY_API_TOKEN=fo1_vRGPJ3oeq5k7Ho2g62o6fLtxZ7f2UgynyYrsS95EL2e", "fo1_vRGPJ3oeq5k7Ho2g62o6fLtxZ7f2UgynyYrsS95EL2e"),
            ("flyio_token", "Authorization: FlyV1 fm2_iucpBD3bSdD6g7miORV9UpbTAwacmXPklfVAxohuPbPEuwBSsJALOdoAPLRxY85qzYAQnA6uS0CXWKaYrXJUXpvgcVz2rTBwfgZnfMab6YksVOIm6hyNhfqQ", "fm2_iucpBD3bSdD6g7miORV9UpbTAwacmXPklfVAxohuPbPEuwBSsJALOdoAPLRxY85qzYAQnA6uS0CXWKaYrXJUXpvgcVz2rTBwfgZnfMab6YksVOIm6hyNhfqQ"),
            ("render_api_key", "RENDER_API_KEY=rnd_QAVy89JPS0n5OtTWIxGVUpLkV3TPiv5c", "rnd_QAVy89JPS0n5OtTWIxGVUpLkV3TPiv5c"),
            ("frameio_token", "Authorization: Bearer-less fio-u-Eft0LDJSrDtUOg0dKGVawAZm4MdzuRMB5ofmzhLEn5WfsEsY1w53q2RnRNC67ymN", "fio-u-Eft0LDJSrDtUOg0dKGVawAZm4MdzuRMB5ofmzhLEn5WfsEsY1w53q2RnRNC67ymN"),
            ("vercel_blob_token", "BLOB_READ_WRITE_TOKEN=\"vercel_blob_rw_zZlu8pP57WcRgwJt_GCMtkua6UMUrX2rwcfM2AGDA6whQ95\"", "vercel_blob_rw_zZlu8pP57WcRgwJt_GCMtkua6UMUrX2rwcfM2AGDA6whQ95"),
            ("google_oauth_refresh_token", "{\"refresh_token\": \"1//0XMUza9jZrxk6yzPiWtu479-y99aEq_iQ72GWaI8A2Fc8kZUk4gI2VOhVUyM3mnNWfs-nszHqW9781L8g74Oi7MjAVO\", \"scope\": \"openid\"}", "1//0XMUza9jZrxk6yzPiWtu479-y99aEq_iQ72GWaI8A2Fc8kZUk4gI2VOhVUyM3mnNWfs-nszHqW9781L8g74Oi7MjAVO"),
            ("linear_oauth_token", "config value = lin_oauth_c2117d363c2039685af55d8a367105c98ac181c65e02d0d9771a4bc84f05a34f", "lin_oauth_c2117d363c2039685af55d8a367105c98ac181c65e02d0d9771a4bc84f05a34f"),
            ("smtp_auth_plain", "send: 'AUTH PLAIN AGFwcABacjhrcTJMbVZ4OXc=\r\n'", "AGFwcABacjhrcTJMbVZ4OXc="),
        ] {
            tp(rule, s(text), s(secret));
        }
        // A password fed to a command's standard input, or hashed by openssl passwd.
        for (rule, line) in [
            (
                "cli_password_positional",
                "echo Vd8kLm2Zqr | docker login -u bob --password-stdin registry.example.com",
            ),
            (
                "cli_password_positional",
                "echo 'Vd8kLm2Zqr' | helm registry login r.example.com -u bob --password-stdin",
            ),
            (
                "cli_password_positional",
                "printf '%s' 'Vd8kLm2Zqr' | passwd --stdin bob",
            ),
            (
                "cli_password_positional",
                "keepassxc-cli open db.kdbx --pw-stdin <<< Vd8kLm2Zqr",
            ),
            (
                "cli_password_positional",
                "docker login -u bob --password-stdin <<< 'Vd8kLm2Zqr'",
            ),
            (
                "cli_password_positional",
                "useradd -m -p \"$(openssl passwd -6 Vd8kLm2Zqr)\" bob",
            ),
            (
                "cli_password_positional",
                "openssl passwd -1 -salt xyz Vd8kLm2Zqr",
            ),
            (
                "cli_password_client_flag",
                "openssl enc -aes-256-cbc -salt -k Vd8kLm2Zqr -in a -out b",
            ),
            ("cli_password_client_flag", "sqlplus scott/Vd8kLm2Zqr@orcl"),
            (
                "cli_password_client_flag",
                "sqlplus -s system/Vd8kLm2Zqr @script.sql",
            ),
            (
                "cli_secret_flag",
                "az storage blob upload --account-key Vd8kLm2Zqr== -f x",
            ),
        ] {
            tp(rule, s(line), s("Vd8kLm2Zqr"));
        }
        tp(
            "powershell_plaintext_secure_string",
            s("$pw = ConvertTo-SecureString 'Winter2026!' -AsPlainText -Force"),
            s("Winter2026!"),
        );
        tp(
            "powershell_plaintext_secure_string",
            s("ConvertTo-SecureString -String \"qzva\" -AsPlainText -Force"),
            s("qzva"),
        );
        tp(
            "powershell_plaintext_secure_string",
            s("ConvertTo-SecureString -String -Force dsjUE#$gds8s"),
            s("dsjUE#$gds8s"),
        );
        tp(
            "powershell_plaintext_secure_string",
            s("$k = ConvertTo-SecureString 01000000d08c9ddf0115d1118c7a00c04fc297eb01000000 | Out-Null"),
            s("01000000d08c9ddf0115d1118c7a00c04fc297eb01000000"),
        );
        tp(
            "url_userinfo_password",
            s("SMTP_URL=smtps://alerts@mail.example.com:FnD83JZs@smtp.example.com:465"),
            s("FnD83JZs"),
        );
        tp(
            "cli_secret_flag",
            s("mysql --password=Zq8vLx2Rk --host db"),
            s("Zq8vLx2Rk"),
        );
        tp(
            "secret_key_assignment",
            s("PGPASSWORD=Pa55w0rdX psql -h db"),
            s("Pa55w0rdX"),
        );
        tp(
            "url_secret_query_param",
            s("GET https://files.example.com/a.pdf?X-Amz-Signature=9f8e7d6c5b4a&sig=Qm9vYmFy"),
            s("9f8e7d6c5b4a"),
        );
        tp(
            "secret_key_assignment",
            s("db:\n  password: \"c0rrect-h0rse\"\n"),
            s("c0rrect-h0rse"),
        );
        tp(
            "high_entropy_near_keyword",
            s("the signing secret (rotated) Zk3q9XbT2mLw8RvNc1dF5gH0jKa"),
            s("Zk3q9XbT2mLw8RvNc1dF5gH0jKa"),
        );
        tp(
            "email_address",
            s("contact jane.doe+agent@example.co.uk today"),
            s("jane.doe+agent@example.co.uk"),
        );
        tp(
            "phone_number_international",
            s("call +44 20 7946 0958 now"),
            s("+44 20 7946 0958"),
        );
        tp(
            "phone_number_international",
            s("whatsapp +1 415 555 0132"),
            s("+1 415 555 0132"),
        );
        tp(
            "phone_number_north_american",
            s("office (415) 555-0132 ext 4"),
            s("(415) 555-0132"),
        );
        tp(
            "phone_number_north_american",
            s("cell 212.555.0147."),
            s("212.555.0147"),
        );
        tp(
            "payment_card_number",
            s("card 4111 1111 1111 1111 exp 12/29"),
            s("4111 1111 1111 1111"),
        );
        tp(
            "payment_card_number",
            s("{\"pan\":\"5500000000000004\"}"),
            s("5500000000000004"),
        );
        tp(
            "iban",
            s("IBAN GB82 WEST 1234 5698 7654 32 please"),
            s("GB82 WEST 1234 5698 7654 32"),
        );
        tp(
            "iban",
            s("to DE89370400440532013000."),
            s("DE89370400440532013000"),
        );
        tp(
            "us_social_security_number",
            s("SSN 123-45-6789"),
            s("123-45-6789"),
        );
        tp(
            "ipv4_address",
            s("client 81.2.69.142 connected"),
            s("81.2.69.142"),
        );
        tp(
            "ipv6_address",
            s("from 2a02:c7f:85a3::8a2e:370:7334 via"),
            s("2a02:c7f:85a3::8a2e:370:7334"),
        );
        tp(
            "phone_number_in_context",
            s("please call me at 0490 75 40 81 after six"),
            s("0490 75 40 81"),
        );
        tp(
            "phone_number_in_context",
            s("tel: (08) 8747 6301"),
            s("(08) 8747 6301"),
        );
        tp(
            "onepassword_secret_key",
            s("secret key A3-Q7KX2M-9TR4WPZLB2C-H6N3D-8VQ2K-M4TZR for the vault"),
            s("A3-Q7KX2M-9TR4WPZLB2C-H6N3D-8VQ2K-M4TZR"),
        );
        let ops = format!("ops_eyJ{}", cycle(B62, 260));
        tp(
            "onepassword_service_account_token",
            format!("OP {ops}"),
            ops,
        );
        let age = format!(
            "AGE-SECRET-KEY-1{}",
            cycle("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)
        );
        tp("age_secret_key", format!("# key\n{age}\n"), age);
        let ntn = format!("ntn_{}{}", cycle("4561729038", 11), cycle(B62, 35));
        tp("notion_api_token", format!("Authorization {ntn}"), ntn);
        let sgp = format!(
            "sgp_{}_{}",
            cycle("a1B2c3D4e5F6", 16),
            cycle("0f9e8d7c6b5a4", 40)
        );
        tp("sourcegraph_access_token", format!("SRC_ACCESS {sgp}"), sgp);
        let s42 = format!("s-s4t2ud-{}", cycle("d91c558a2ba6b47f", 64));
        tp("intra42_client_secret", format!("client {s42}"), s42);
        let fb = format!("EAAM{}", cycle(B62, 150));
        tp("facebook_access_token", format!("graph {fb}"), fb);
        let harness = format!(
            "sat.{}.{}.{}",
            cycle(B62, 22),
            cycle(B62, 24),
            cycle(B62, 20)
        );
        tp("harness_api_key", format!("x-api-key {harness}"), harness);
        tp(
            "alibaba_access_key_id",
            s("AccessKeyId: LTAI5tQ9mX2pL7vR4tY8wN6b"),
            s("LTAI5tQ9mX2pL7vR4tY8wN6b"),
        );
        tp(
            "alibaba_access_key_id",
            s("aliyun.access-key-id=LTAI9mX2pL7vR4tY"),
            s("LTAI9mX2pL7vR4tY"),
        );
        tp(
            "secret_key_assignment",
            s("var deployToken string = \"q8Zr2LmX4vT9wK1p\""),
            s("q8Zr2LmX4vT9wK1p"),
        );
        tp(
            "secret_key_assignment",
            s("build_TOKEN :::= \"q8Zr2LmX4vT9wK1p\""),
            s("q8Zr2LmX4vT9wK1p"),
        );
        tp(
            "secret_key_assignment",
            s("<add key=\"SmtpPassword\" value=\"Hunter2Winter!\" />"),
            s("Hunter2Winter!"),
        );
        tp(
            "jwt",
            s("jwe eyJhcHUiOiJUeDlxIn0.eyJpc3MiOiJqb2UifQ.c2ln"),
            s("eyJhcHUiOiJUeDlxIn0.eyJpc3MiOiJqb2UifQ.c2ln"),
        );
        // Issue 13 vendor formats: a JSON value, an env line or a log line each.
        let lin = format!("lin_api_{}", cycle(B62, 40));
        tp(
            "linear_api_key",
            format!("{{\"linear\": {{\"apiKey\": \"{lin}\"}}}}"),
            lin,
        );
        let dp = format!("dp.pt.{}", cycle(B62, 43));
        tp("doppler_token", format!("DOPPLER_TOKEN={dp}"), dp);
        let dps = format!("dp.st.dev_api.{}", cycle(B62, 40));
        tp(
            "doppler_token",
            format!("doppler run --token {dps} -- ./app"),
            dps,
        );
        let pul = format!("pul-{}", cycle("3f9a1c7e5b2d8046", 40));
        tp(
            "pulumi_access_token",
            format!("export PULUMI_ACCESS_TOKEN={pul}"),
            pul,
        );
        let pmak = format!(
            "PMAK-{}-{}",
            cycle("0a1b2c3d4e5f", 24),
            cycle("9F8E7D6C5B4A", 34)
        );
        tp(
            "postman_api_key",
            format!("{{\"X-Api-Key\": \"{pmak}\"}}"),
            pmak,
        );
        let dapi = format!("dapi{}-2", cycle("3f9a1c7e5b2d8046", 32));
        tp(
            "databricks_token",
            format!("INFO connecting host=adb-1.azuredatabricks.net token {dapi} ok"),
            dapi,
        );
        let glc = format!("glc_eyJvIjoiMTIzNDU2Iiwi{}==", cycle(B62, 60));
        tp(
            "grafana_cloud_token",
            format!("GRAFANA_CLOUD_TOKEN={glc}"),
            glc,
        );
        let glsa = format!("glsa_{}_{}", cycle(B62, 32), cycle("0a1b2c3d", 8));
        tp(
            "grafana_service_account_token",
            format!("{{\"grafana\": \"{glsa}\"}}"),
            glsa,
        );
        let brevo = format!(
            "xkeysib-{}-{}",
            cycle("0a1b2c3d4e5f6789", 64),
            cycle(B62, 16)
        );
        tp("brevo_api_key", format!("BREVO_API_KEY={brevo}"), brevo);
        let swarm = format!(
            "SWMTKN-1-{}-{}",
            cycle("3abc9xyz07klmn", 50),
            cycle("q4w5e6r7t8", 25)
        );
        tp(
            "docker_swarm_token",
            format!("docker swarm join --token {swarm} 10.0.0.5:2377"),
            swarm,
        );
        let sonar = format!("squ_{}", cycle("5f6278f46c0697b8", 40));
        tp("sonarqube_token", format!("-Dsonar.token={sonar}"), sonar);
        let twilio = cycle("9f8e7d6c5b4a3210", 32);
        tp(
            "twilio_auth_token",
            format!("TWILIO_AUTH_TOKEN: {twilio}"),
            twilio,
        );
        let cohere = cycle(B62, 40);
        tp(
            "cohere_api_key",
            format!("{{\"cohere\": {{\"api_key\": \"{cohere}\"}}}}"),
            cohere,
        );
        let akid = format!("AKID{}", cycle(B62, 32));
        tp(
            "tencent_cloud_secret_id",
            format!("TENCENTCLOUD_SECRET_ID={akid}"),
            akid,
        );
        let fcm = format!("AAAA{}:APA91b{}", cycle(B62, 7), cycle(B62, 134));
        tp(
            "firebase_cloud_messaging_server_key",
            format!("Authorization: key={fcm}"),
            fcm,
        );
        let jfrog = format!("AKCp8{}", cycle(B62, 68));
        tp(
            "jfrog_token",
            format!("ARTIFACTORY_API_KEY = '{jfrog}'"),
            jfrog,
        );
        let reftkn = format!("cmVmdGtu{}", cycle(B62, 56));
        tp("jfrog_token", format!("--access-token {reftkn}"), reftkn);
        let mistral = cycle(B62, 32);
        tp(
            "mistral_api_key",
            format!("MISTRAL_API_KEY=\"{mistral}\""),
            mistral,
        );
        let discord = format!(
            "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.{}.{}",
            cycle(B62, 6),
            cycle(B62, 38)
        );
        tp(
            "discord_bot_token",
            format!("Authorization: Bot {discord}"),
            discord,
        );
        let mg = format!("key-{}", cycle("3f9a1c7e5b2d8046", 32));
        tp(
            "mailgun_api_key",
            format!("MAILGUN_API_KEY={mg}"),
            mg.clone(),
        );
        tp(
            "mailgun_api_key",
            format!("{{\"mailgun\": {{\"key\": \"{mg}\"}}}}"),
            mg,
        );
        let mg2 = format!(
            "{}-{}-{}",
            cycle("0a1b2c3d4e5f", 32),
            cycle("9f8e", 8),
            cycle("7d6c", 8)
        );
        tp("mailgun_api_key", format!("mailgun signing {mg2}"), mg2);
        tp(
            "nats_nkey_seed",
            // A valid seed is named by its checksum (`nats_nkey_seed_checked`); this one's
            // last character is changed, so only the word NATS near it names it.
            s("-----BEGIN USER NKEY SEED-----\nSUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VA\n------END USER NKEY SEED------"),
            s("SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VA"),
        );
        tp(
            "nats_nkey_seed_checked",
            s("# SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM (ci user)"),
            s("SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM"),
        );
        let okta = format!("00{}-_", cycle(B62, 38));
        tp(
            "okta_api_token",
            format!("OKTA_API_TOKEN={okta}"),
            okta.clone(),
        );
        tp(
            "okta_api_token",
            format!("{{\"okta\": {{\"token\": \"{okta}\"}}}}"),
            okta,
        );
        let sl = format!("sl.u.{}", cycle("AbCdEf-_1234", 140));
        tp(
            "dropbox_access_token",
            format!("{{\"access_token\": \"{sl}\", \"token_type\": \"bearer\"}}"),
            sl,
        );
        let sf = format!(
            "00D5g000004ABCD!{}",
            cycle("AR8AQJXg5oj8jXSgx.JfA0lBog_39AsX", 96)
        );
        tp(
            "salesforce_access_token",
            format!("sf org login access-token --instance-url x {sf}"),
            sf,
        );
        let sntrys = format!(
            "sntrys_eyJpYXQiOjE3MDAwMDAwMDAuMCwidXJsIjoi{}_{}",
            cycle(B62, 60),
            cycle(B62, 43)
        );
        tp(
            "sentry_token",
            format!("SENTRY_AUTH_TOKEN={sntrys}"),
            sntrys,
        );
        // Written without the `_` after the payload's padding, its secret in the URL-safe
        // alphabet: still the vendor's prefix and payload, and a secret all the same.
        let sntrys_variant = format!(
            "sntrys_eyJpYXQiOjE3MDAwMDAwMDAuMCwidXJsIjoiaHR0cHM6Ly9zZW50cnkuaW8ifQ=={}",
            cycle("v8D-Kq2_Lz9wXv3RnT", 43)
        );
        tp(
            "sentry_token",
            format!("token: {sntrys_variant}"),
            sntrys_variant,
        );
        // The shortest it takes: 40 token characters after `eyJ`.
        let sntrys_shortest = "sntrys_eyJpYXQiOjE3MDAwMDAwMDAuMCwidXJsIjoiaHR0cHM";
        tp(
            "sentry_token",
            format!("sentry {sntrys_shortest} cut short"),
            sntrys_shortest.to_string(),
        );
        let sntryu = format!("sntryu_{}", cycle("3f9a1c7e5b2d8046", 64));
        tp(
            "sentry_token",
            format!("{{\"sentry\": \"{sntryu}\"}}"),
            sntryu,
        );
        let sbp = format!("sbp_{}", cycle("3f9a1c7e5b2d8046", 40));
        tp(
            "supabase_secret_key",
            format!("supabase login --token {sbp}"),
            sbp,
        );
        let sbs = format!("sb_secret_{}", cycle("N7UND0UgjKTVK-Uodkm0Hg_xSvEMPvz", 31));
        tp(
            "supabase_secret_key",
            format!("{{\"supabaseKey\": \"{sbs}\"}}"),
            sbs,
        );
        let ps = format!("pscale_tkn_{}", cycle("aZ3kQ9mX2pL7.vR4t_Y8w-N6bC", 43));
        tp(
            "planetscale_token",
            format!("PLANETSCALE_SERVICE_TOKEN={ps}"),
            ps,
        );
        let nfp = format!("nfp_{}", cycle(B62, 36));
        tp(
            "netlify_access_token",
            format!("netlify deploy --auth {nfp}"),
            nfp,
        );
        let figd = format!("figd_{}", cycle("aZ3kQ9mX2pL7vR4t_Y8wN6bC1d-F5gH0jK", 40));
        tp(
            "figma_access_token",
            format!("{{\"X-Figma-Token\": \"{figd}\"}}"),
            figd,
        );
        let oy2 = format!("oy2{}", cycle("a3kq9mx2pl7vr4ty8wn6bc1df5gh0jk", 43));
        tp(
            "nuget_api_key",
            format!("dotnet nuget push pkg.nupkg --api-key {oy2}"),
            oy2,
        );
        let gem = format!("rubygems_{}", cycle("3f9a1c7e5b2d8046", 48));
        tp("rubygems_api_key", format!("GEM_HOST_API_KEY={gem}"), gem);
        let clj = format!("CLOJARS_{}", cycle(B62, 60));
        tp(
            "clojars_deploy_token",
            format!("{{:username \"me\" :password \"{clj}\"}}"),
            clj,
        );
        let phx = format!("phx_{}", cycle(B62, 43));
        tp(
            "posthog_personal_api_key",
            format!("{{\"personal_api_key\": \"{phx}\"}}"),
            phx,
        );
        let xai = format!("xai-{}", cycle(B62, 80));
        tp("xai_api_key", format!("XAI_API_KEY={xai}"), xai);
        let nrak = format!("NRAK-{}", cycle("Z3KQ9MX2PL7VR4TY8WN6BC1DF5GH0JK", 27));
        tp(
            "new_relic_key",
            format!("{{\"Api-Key\": \"{nrak}\"}}"),
            nrak,
        );
        let llx = format!("llx-{}", cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 48));
        tp(
            "llamacloud_api_key",
            format!("LLAMA_CLOUD_API_KEY={llx}"),
            llx,
        );
        let tgp = format!("tgp_v1_{}", cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 43));
        tp(
            "together_api_key",
            format!("client = Together(api_key=\"{tgp}\")"),
            tgp,
        );
        let cosmo = format!("cosmo_{}", cycle("3f9a1c7e5b2d8046", 32));
        tp(
            "wundergraph_cosmo_api_key",
            format!("export COSMO_API_KEY={cosmo}"),
            cosmo,
        );
        let atbb = format!(
            "ATBB{}{}",
            cycle("aZ3kQ9mX2pL7vR4tY8wN6bC1", 24),
            "54D591C4"
        );
        tp(
            "bitbucket_app_password",
            format!("git clone https://me:{atbb}@bitbucket.org/team/repo.git"),
            atbb,
        );
        let gocspx = format!("GOCSPX-{}", cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 28));
        tp(
            "google_oauth_client_secret",
            format!("{{\"client_secret\":\"{gocspx}\",\"redirect_uris\":[]}}"),
            gocspx,
        );
        // base64 of {"k":"…","n":"deploy","id":1}
        let grafana =
            "eyJrIjoiT0tTcG1pUlY2RnVKZTFVaDFsNFZXdE9ZWmNrMkZYbk4iLCJuIjoiZGVwbG95IiwiaWQiOjF9";
        tp(
            "grafana_api_key",
            format!("Authorization: Bearer {grafana}"),
            s(grafana),
        );
        let dbx = format!(
            "{}AAAAAAAAAA{}",
            cycle("aZ3kQ9mX2pL", 11),
            cycle("c72L3T6rQK5_1mB5a06-ijnwRG91deTxvSqdZNAlxq8", 43)
        );
        tp(
            "dropbox_long_lived_token",
            format!("dbx = dropbox.Dropbox('{dbx}')"),
            dbx,
        );
        tp(
            "alibaba_access_key_secret",
            s("client = AcsClient('LTAI5tQ9mX2pL7vR4tY8wN6b', 'Zk3q9XbT2mLw8RvNc1dF5gH0jKaZ3k', 'cn-hangzhou')"),
            s("Zk3q9XbT2mLw8RvNc1dF5gH0jKaZ3k"),
        );
        tp(
            "alibaba_access_key_secret",
            s("AccessKeyId=LTAI4GQ9mX2pL7vR, AccessKeySecret=Zk3q9XbT2mLw8RvNc1dF5gH0jKaZ3k"),
            s("Zk3q9XbT2mLw8RvNc1dF5gH0jKaZ3k"),
        );
        let mvg = format!("3MVG9{}", cycle("aZ3kQ9mX2pL7vR4.tY8wN6bC1_dF5gH0jK", 80));
        tp(
            "salesforce_consumer_key",
            format!("sf_client_id: {mvg}"),
            mvg,
        );
        tp(
            "heroku_api_key",
            s("HEROKU_API_KEY=HRKU-f1274537-88fb-4eaf-beda-453bd9a496ef"),
            s("HRKU-f1274537-88fb-4eaf-beda-453bd9a496ef"),
        );
        let dckr_oat = format!(
            "dckr_oat_{}",
            cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 32)
        );
        tp(
            "docker_pat",
            format!("docker login -u myorg --password-stdin <<< {dckr_oat}"),
            dckr_oat,
        );
        let atctt = format!(
            "ATCTT3xFfGN0{}={}",
            cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 171),
            "0A1B2C3D"
        );
        tp(
            "atlassian_api_token",
            format!("BITBUCKET_ACCESS_TOKEN={atctt}"),
            atctt,
        );
        let bbdc = format!("BBDC-Mz{}", cycle("aZ3k+Q9mX2pL7vR4/tY8wN6bC1dF5gH0jK", 42));
        tp(
            "bitbucket_data_center_token",
            format!("Authorization: Bearer {bbdc}"),
            bbdc,
        );
        let gr = format!(
            "GR1348941{}",
            cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 20)
        );
        tp(
            "gitlab_token",
            format!("gitlab-runner register --registration-token {gr}"),
            gr,
        );
        let igqvj = format!("IGQVJ{}", cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 140));
        tp(
            "instagram_access_token",
            format!("https://graph.instagram.com/me?fields=id&access_token={igqvj}"),
            igqvj,
        );
        let ya29 = format!(
            "ya29.a0{}",
            cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 150)
        );
        tp(
            "google_oauth_access_token",
            format!("{{\"access_token\":\"{ya29}\",\"expires_in\":3599}}"),
            ya29,
        );
        tp(
            "amazon_mws_auth_token",
            s("MWSAuthToken=amzn.mws.4ea38b7b-f563-7709-4bae-87aea15c0a2e"),
            s("amzn.mws.4ea38b7b-f563-7709-4bae-87aea15c0a2e"),
        );
        let or = format!("sk-or-v1-{}", cycle("3f9a1c7e5b2d8046", 64));
        tp("openrouter_api_key", format!("OPENROUTER_API_KEY={or}"), or);
        let skhex = format!("sk-{}", cycle("3f9a1c7e5b2d8046", 32));
        tp(
            "sk_hex_api_key",
            format!("client = OpenAI(api_key=\"{skhex}\", base_url=\"https://api.deepseek.com\")"),
            skhex,
        );
        let nvapi = format!("nvapi-{}", cycle("aZ3k_Q9mX2pL7vR4-tY8wN6bC1dF5gH0jK", 64));
        tp(
            "nvidia_api_key",
            format!("Authorization: Bearer {nvapi}"),
            nvapi,
        );
        let csk = format!("csk-{}", cycle("85fv2ekx4856xnp38jt82e", 48));
        tp(
            "cerebras_api_key",
            format!("export CEREBRAS_API_KEY=\"{csk}\""),
            csk,
        );
        let pcsk = format!(
            "pcsk_{}_{}",
            cycle("6e2JzS", 6),
            cycle("aZ3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jK", 63)
        );
        tp(
            "pinecone_api_key",
            format!("pc = Pinecone(api_key=\"{pcsk}\")"),
            pcsk,
        );
        let tvly = format!("tvly-dev-{}", cycle("aZ3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jK", 32));
        tp(
            "tavily_api_key",
            format!("{{\"api_key\": \"{tvly}\", \"query\": \"weather\"}}"),
            tvly,
        );
        let lsv2 = format!(
            "lsv2_pt_{}_{}",
            cycle("3f9a1c7e5b2d8046", 32),
            cycle("0a1b2c3d4e", 10)
        );
        tp(
            "langsmith_api_key",
            format!("LANGSMITH_API_KEY={lsv2}"),
            lsv2,
        );
        tp(
            "langfuse_secret_key",
            s("Langfuse(public_key=\"pk-lf-1234abcd-0000-4000-8000-0123456789ab\", secret_key=\"sk-lf-3f9a1c7e-5b2d-4046-8a1b-2c3d4e5f6a7b\")"),
            s("sk-lf-3f9a1c7e-5b2d-4046-8a1b-2c3d4e5f6a7b"),
        );
        let e2b = format!("e2b_{}", cycle("3f9a1c7e5b2d8046", 40));
        tp("e2b_api_key", format!("E2B_API_KEY={e2b}"), e2b);
        let fc = format!("fc-{}", cycle("0a1b2c3d4e5f6789", 32));
        tp(
            "firecrawl_api_key",
            format!("app = FirecrawlApp(api_key=\"{fc}\")"),
            fc,
        );
        let bb = format!("bb_live_{}", cycle("aZ3kQ9mX2pL7vR4tY8wN6b", 27));
        tp(
            "browserbase_api_key",
            format!("{{\"BROWSERBASE_API_KEY\": \"{bb}\"}}"),
            bb,
        );
        let pat = format!(
            "pat{}.{}",
            cycle("Xk9mP2qLw8rTz4", 14),
            cycle("3f9a1c7e5b2d8046", 64)
        );
        tp(
            "airtable_pat",
            format!(
                "curl -H \"Authorization: Bearer {pat}\" https://api.airtable.com/v0/meta/bases"
            ),
            pat,
        );
        for (line, code) in [
            ("Your verification code is 482913.", "482913"),
            ("sms: ACME login code: 4821 (valid 10 minutes)", "4821"),
            ("your OTP is 719-204", "719-204"),
            ("Enter the one-time code 55210937 to continue", "55210937"),
        ] {
            tp("one_time_code", s(line), s(code));
        }
        for (line, codes) in [
            (
                "GitHub recovery codes: 3f9a1-c7e5b 2d804-6a1b2 9c3d4-e5f6a",
                "3f9a1-c7e5b 2d804-6a1b2 9c3d4-e5f6a",
            ),
            (
                "Backup codes:\n- 8231 4471\n- 9923 1187\n- 5502 7716",
                "8231 4471\n- 9923 1187\n- 5502 7716",
            ),
            (
                "recovery key: K7QX2-9MZ4T-WP3LD-8RBN6-YH5CV",
                "K7QX2-9MZ4T-WP3LD-8RBN6-YH5CV",
            ),
        ] {
            tp("account_recovery_codes", s(line), s(codes));
        }
        let eleven = format!("sk_{}", cycle("3f9a1c7e5b2d8046", 48));
        tp(
            "elevenlabs_api_key",
            format!("client = ElevenLabs(api_key=\"{eleven}\")"),
            eleven,
        );
        let xaat = "xaat-3f9a1c7e-5b2d-4046-8a1b-2c3d4e5f6a7b".to_string();
        tp(
            "axiom_api_token",
            format!("curl -H 'Authorization: Bearer {xaat}' https://api.axiom.co/v1/datasets"),
            xaat,
        );
        let plaid = "access-sandbox-de3ce8ef-33f8-452c-a685-8671031fc0f6".to_string();
        tp(
            "plaid_access_token",
            format!("{{\"item\": {{\"handle\": \"{plaid}\"}}}}"),
            plaid,
        );
        let mdb = format!("mdb_sa_sk_{}", cycle("aZ3kQ9mX2pL7vR4tY8wN6b", 40));
        tp(
            "mongodb_atlas_service_account_secret",
            format!("atlas auth login --clientSecret {mdb}"),
            mdb,
        );
        let notion = format!("secret_{}", cycle(B62, 43));
        tp("notion_api_token", format!("NOTION_KEY: {notion}"), notion);
        let nrii = format!("NRII-{}", cycle("aZ3k-Q9mX2pL7vR4", 32));
        tp("new_relic_key", format!("insert key {nrii}"), nrii);
        let dt = format!(
            "dt0c01.{}.{}",
            cycle("ST2EY72KQINMH574WMNVI7YN", 24),
            cycle(
                "G3DFPBEJYMODIDAEX454M7YWBUVEFOWKPRVMWFASS64NFH52PX6BNDVFFM572RZM",
                64
            )
        );
        tp(
            "dynatrace_api_token",
            format!("Authorization: Api-Token {dt}"),
            dt,
        );
        let ts = format!("tskey-auth-k{}CNTRL-{}", cycle("ABCD12", 6), cycle(B62, 33));
        tp("tailscale_key", format!("TS_AUTHKEY={ts}"), ts);
        let sg_edge = format!("SG.{}-.{}-", cycle(B62, 21), cycle(B62, 42));
        tp(
            "sendgrid_api_key",
            format!("key {sg_edge} rotated"),
            sg_edge,
        );
        v
    }

    /// A token with a valid GitHub-style CRC32 checksum.
    fn valid_github(prefix: &str) -> String {
        let random = cycle(B62, 30);
        let mut n = crc32fast::hash(random.as_bytes());
        let alphabet = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut check = [b'0'; 6];
        for slot in check.iter_mut().rev() {
            *slot = alphabet[(n % 62) as usize];
            n /= 62;
        }
        format!(
            "{prefix}{random}{}",
            std::str::from_utf8(&check).expect("ascii")
        )
    }

    /// (rule, text that rule must not fire on)
    fn false_positives() -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "aws_access_key_id",
                "AKIAIOSFODNN7EXAMPL is one short; akiaiosfodnn7example is lowercase",
            ),
            ("aws_secret_access_key", "aws_region = us-east-1"),
            // AWS's documented example keys are documentation.
            ("aws_access_key_id", "see AKIAIOSFODNN7EXAMPLE in the AWS docs"),
            (
                "aws_bedrock_api_key",
                "ABSKQmVkcm9ja0FQSUtleS1EXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLE",
            ),
            ("aws_bedrock_api_key", "ABSK is a prefix but this is short"),
            (
                "facebook_access_token",
                "data:image/jpeg;base64,JHuvg39lz4T/EAACRvAWiwzR8rcXFsLiUH13ybj0tdEaNOOyOCeLr1Pimz063torSJYoIkhjXokahQPwFbHK3fcsQTyWsySxOY5EO5WU4INJpNWY4yc+MfMO",
            ),
            ("llamacloud_api_key", "llx-short and cellx-a"),
            ("openrouter_api_key", "sk-or-v1-... in the docs"),
            (
                "sk_hex_api_key",
                "task-3f9a1c7e5b2d80463f9a1c7e5b2d8046 and sk-3f9a1c7e5b2d8046",
            ),
            ("nvidia_api_key", "nvapi-your-key-here"),
            ("cerebras_api_key", "csk-abc and desk-85fv2ekx4856xnp38jt82eeeyrcjwhw2n9pmd9nnkv4ftpej"),
            ("pinecone_api_key", "pcsk_... in the docs"),
            ("tavily_api_key", "tvly-YOUR_API_KEY"),
            ("crypt_password_hash", "the format is $6$salt$hash, see crypt(5)"),
            ("crypt_password_hash", "price: $5$ per month, $6$ with support"),
            ("crypt_password_hash", "AuthUserFile holds $apr1$ hashes"),
            ("htpasswd_sha1", "{SHA} is the scheme, {SHA}short= is not a hash"),
            ("pgpass_password", "db:5432:shop:app:*"),
            ("pgpass_password", "ports 80:5432:6379: and more"),
            ("aws_sigv4_signature", "Authorization: AWS4-HMAC-SHA256 Credential=<id>/<scope>, SignedHeaders=host, Signature=<signature>"),
            ("aws_appsync_api_key", "da2-short and da2-aaaaaaaaaaaaaaaaaaaaaaaaaa"),
            ("defined_networking_api_key", "dnkey- is the prefix of a Defined Networking key"),
            ("twitter_bearer_token", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            ("twitter_bearer_token", "AAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA0%2FAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+/w=="),
            ("akamai_edgegrid_token", "host = akab-xxxxxxxxxxxxxxxx-xxxxxxxxxxxxxxxx.luna.akamaiapis.net"),
            ("vercel_token", "vcp_ tokens are personal; vck_YOUR_API_KEY"),
            ("posthog_personal_api_key", "phc_Vb7Nq2Wr9Xz4Lk1Mp6Hd3Jf8Gs5Tc0Ya7Ue2Io9Pw4Qr1Zx is the public project key"),
            ("new_relic_key", "NRAA-xyz and a1b2NRAL"),
            ("contentful_pat", "CFPAT-your-token-here"),
            ("mapbox_secret_token", "pk.eyJ1IjoiYWNtZSIsImEiOiJjbHh5ejEyMzQifQ.nHslFTLuT4JkaMy5FiW4nA is public"),
            ("prefect_api_key", "pnu_... from the dashboard"),
            ("readme_api_key", "rdme_xxxxxxxx"),
            ("shippo_api_token", "shippo_test_<token>"),
            ("typeform_token", "tfp_YOUR_TOKEN"),
            ("adafruit_io_key", "aio_read(&cb) and aio_write(&cb)"),
            ("duffel_token", "duffel_test_token_goes_here"),
            ("easypost_api_key", "EZAK is the prefix of a production key"),
            ("infracost_api_key", "favico-icon.png"),
            ("buildkite_token", "bkua_ prefix"),
            ("circleci_pat", "CCIPAT_ tokens are personal"),
            ("neon_api_key", "napi_create_string_utf8(env, s, len, &out)"),
            ("flyio_token", "fo1_short and fm2_short"),
            ("render_api_key", "rnd_seed = 42"),
            ("frameio_token", "fio-u-token"),
            ("vercel_blob_token", "vercel_blob_rw_ prefix"),
            ("google_oauth_refresh_token", "see https://example.com/a/1//0/b"),
            ("linear_oauth_token", "lin_oauth_token = get_token()"),
            ("smtp_auth_plain", "250-AUTH PLAIN LOGIN XOAUTH2"),
            ("langsmith_api_key", "lsv2_pt_xxxxx"),
            ("e2b_api_key", "e2b_template_id = 'base' and e2b_3f9a"),
            ("firecrawl_api_key", "fc-gap and fc-3f9a1c7e"),
            ("browserbase_api_key", "bb_live_ prefix, bb_live_short"),
            (
                "elevenlabs_api_key",
                "sk_live_3f9a1c7e5b2d80463f9a1c7e5b2d80463f9a1c7e5b2d8046 and sk_3f9a1c7e",
            ),
            (
                "axiom_api_token",
                "xaat-token and xapt-3f9a1c7e-5b2d-4046-8a1b",
            ),
            (
                "plaid_access_token",
                "access-sandbox-enabled and public-sandbox-de3ce8ef-33f8-452c-a685-8671031fc0f6",
            ),
            (
                "mongodb_atlas_service_account_secret",
                "mdb_sa_id_3f9a1c7e5b2d8046aZ3kQ9mX and mdb_sa_sk_short",
            ),
            (
                "airtable_pat",
                "patient_records_v2.json and patXXXXXXXXXXXXXX.abc",
            ),
            (
                "langfuse_secret_key",
                "pk-lf-1234abcd-0000-4000-8000-0123456789ab is the public key",
            ),
            ("bitbucket_data_center_token", "BBDC-short, and BBDC-Xz is not the alphabet"),
            ("instagram_access_token", "IGQVJ is the prefix of IGQVJshort"),
            ("google_oauth_access_token", "ya29.short and ya29 alone"),
            ("amazon_mws_auth_token", "amzn.mws. without its id"),
            ("together_api_key", "tgp_v1_ alone"),
            (
                "wundergraph_cosmo_api_key",
                "cosmo_db_client = cosmo_connect(); cosmo_3f9a1c7e5b2d8046",
            ),
            ("bitbucket_app_password", "ATBB is a prefix; ATBBshortToken"),
            ("google_oauth_client_secret", "GOCSPX- is the prefix"),
            ("grafana_api_key", "eyJrIjoi is short"),
            (
                "dropbox_long_lived_token",
                "padding AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
            ),
            (
                "dropbox_long_lived_token",
                "data:image/png;base64,iVBORw0KGgo+QEocEYEHs8AAAAAAAAAAAAAAAAH0xfERObUk8ACpV4GlQuye2j0lwVjAPfeqUrLY/8ACpV",
            ),
            (
                "alibaba_access_key_secret",
                "LTAI5tQ9mX2pL7vR4tY8wN6b, region cn-hangzhou, AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            ),
            ("salesforce_consumer_key", "3MVG is the prefix of 3MVG9short"),
            ("gcp_api_key", "AIzaSy too short"),
            (
                "gcp_service_account_private_key_id",
                "\"private_key_id\": \"unknown\"",
            ),
            ("azure_storage_account_key", "AccountKey=short=="),
            ("azure_ad_client_secret", "Q~ alone is nothing"),
            (
                "azure_identifiable_key",
                "JQQJ99 alone, and 7q4Xb2Lm9KpR3tVw7q4Xb2Lm9KpR3tVwJQQJ99ALACAAAAAAAAAAAAASAZDO too short",
            ),
            (
                "jwk_private_key",
                "{kty: 'RSA', e: 'AQAB', n: 'sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1Wl'} and {d: 'not a key value', p: 'short'}",
            ),
            ("digitalocean_token", "dop_v1_notahexstring"),
            ("heroku_api_key", "HRKU-short"),
            ("cloudflare_origin_ca_key", "v1.0-release notes"),
            ("github_token", "ghp_ is a prefix"),
            ("github_token_unverified", "ghp_tooShort123"),
            ("github_fine_grained_pat", "github_pat_short"),
            ("gitlab_token", "glpat-short"),
            ("npm_token", "npm_install is a step"),
            ("npm_token_unverified", "run npm_config_cache"),
            ("pypi_token", "pypi-AgEI"),
            ("atlassian_api_token", "ATATT short"),
            ("hashicorp_token", "hvs.short"),
            ("docker_pat", "dckr_pat_x"),
            (
                "openai_api_key",
                "sk-learn is a library; task-1234 is a ticket",
            ),
            ("anthropic_api_key", "sk-ant-api03-short"),
            // Counting up (`klmnopqrstuvwx`): documentation's, not a key's.
            (
                "anthropic_api_key",
                "sk-ant-api03-abc123xyz-456def789ghij-klmnopqrstuvwx-3456yza789bcde-1234fghijklmnopby56aaaogaopaaaabc123xyzAA",
            ),
            ("huggingface_token", "hf_hub_download(repo)"),
            ("groq_api_key", "gsk_short"),
            ("perplexity_api_key", "pplx-short"),
            ("replicate_api_token", "r8_short"),
            ("stripe_key", "sk_live_ alone"),
            ("stripe_webhook_secret", "whsec_short"),
            ("square_token", "sq0atp-short"),
            ("braintree_access_token", "access_token$production$"),
            ("slack_token", "xoxb- is a prefix"),
            ("slack_webhook_url", "https://hooks.slack.com/ docs"),
            (
                "discord_webhook_url",
                "https://discord.com/api/webhooks/ docs",
            ),
            ("teams_webhook_url", "https://learn.microsoft.com/webhooks"),
            ("zapier_webhook_url", "https://hooks.zapier.com/hooks/catch/ is the prefix"),
            ("telegram_bot_token", "12:30:AA meeting"),
            ("sendgrid_api_key", "SG.short.value"),
            ("twilio_api_key", "SKU-0123456789"),
            ("mailchimp_api_key", "deadbeef-us1"),
            ("shopify_token", "shpat_short"),
            ("jwt", "eyJmb28iOiJiYXIifQ.eyJub3QganNvbg.sig"),
            (
                "private_key",
                "-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----",
            ),
            ("putty_private_key", "PuTTY is a client"),
            ("linear_api_key", "lin_api_short"),
            ("doppler_token", "dp.pt.short and dp.st.dev.short"),
            ("pulumi_access_token", "pul-3f9a1c is short; pull-request"),
            ("postman_api_key", "PMAK-short-value"),
            ("databricks_token", "dapi_endpoint and dapi3f9a1c7e"),
            (
                "grafana_cloud_token",
                "glc_version_string_of_the_compiler_toolchain_x",
            ),
            ("grafana_service_account_token", "glsa_short_0a1b2c3d"),
            (
                "mailgun_api_key",
                "cache key-3f9a1c7e5b2d80463f9a1c7e5b2d8046 hit",
            ),
            ("brevo_api_key", "xkeysib- is Brevo's prefix"),
            ("docker_swarm_token", "SWMTKN-1-short-token"),
            ("sonarqube_token", "squ_ and sqp_ prefixes; sqa_1234"),
            (
                "twilio_auth_token",
                "twilio message 3f9a1c7e-5b2d-8046-3f9a-1c7e5b2d8046 queued",
            ),
            (
                "cohere_api_key",
                "cohere model command-r-plus-08-2024 answered",
            ),
            (
                "tencent_cloud_secret_id",
                "AKID is the prefix; AKIDshort1234 is not a key",
            ),
            (
                "firebase_cloud_messaging_server_key",
                "registration token fcm:APA91bShortValue123",
            ),
            (
                "mistral_api_key",
                "mistral model mistral-large-2411 answered in 0.8 s",
            ),
            ("jfrog_token", "AKCp is JFrog's prefix; cmVmdGtu decodes to reftkn"),
            (
                "discord_bot_token",
                "discord release notes v1.2.3.4 and a.b.c",
            ),
            (
                "nats_nkey_seed",
                "nats user UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4",
            ),
            (
                "nats_nkey_seed_checked",
                "# SUAM3CUGQIYRX5P6TULWVZZ5OM3X2VXLTDKMFBZFIIWNKCBAZ2ULG6PCFE fails its checksum",
            ),
            (
                "okta_api_token",
                "okta user 00u1a2b3c4d5e6f7g8h9 and 00ab3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jKaZ3kQ9mX2 elsewhere",
            ),
            ("dropbox_access_token", "openssl.cnf and sl.short"),
            ("salesforce_access_token", "org 00D5g000004ABCD has no session"),
            ("sentry_token", "sntrys_short and sntryu_3f9a"),
            (
                // The payload's run stops one short of the 40 a token takes after `eyJ`.
                "sentry_token",
                "sentry sntrys_eyJpYXQiOjE3MDAwMDAwMDAuMCwidXJsIjoiaHR0cH cut short",
            ),
            (
                // `okta` inside another word (booktable) is not the vendor's name.
                "okta_api_token",
                "bookTable = 00ab3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jKaZ3kQ9mX",
            ),
            (
                "supabase_secret_key",
                "sb_publishable_aZ3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jK is public",
            ),
            ("planetscale_token", "pscale_tkn_short"),
            ("netlify_access_token", "nfp_short"),
            ("figma_access_token", "figd_short"),
            ("nuget_api_key", "oy2short"),
            ("rubygems_api_key", "rubygems_version 3.4.10"),
            ("clojars_deploy_token", "CLOJARS_USERNAME"),
            (
                "posthog_personal_api_key",
                "phc_aZ3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jKaZ3kQ9mX2pL is a public project key",
            ),
            ("xai_api_key", "xai-grok-2 model"),
            ("new_relic_key", "NRAK-short NRJS-0a1b2c3d4e5f6a7b8c9"),
            ("dynatrace_api_token", "dt0c01.short.value"),
            ("tailscale_key", "tskey-auth-short"),
            ("bearer_token", "bearer of bad news"),
            (
                "basic_auth_credentials",
                "Basic aGVsbG8gd29ybGQ= is hello world",
            ),
            ("url_userinfo_password", "https://example.com/path:8080"),
            (
                "url_userinfo_password",
                "ssh://git@github.example.com:22/org/repo and mailto:a@b.example",
            ),
            (
                "powershell_plaintext_secure_string",
                "ConvertTo-SecureString -String (Get-Content pw.txt) -AsPlainText -Force",
            ),
            ("powershell_plaintext_secure_string", "ConvertTo-SecureString | Get-Member"),
            (
                "powershell_plaintext_secure_string",
                "Use ConvertTo-SecureString to make a secure string, then ConvertTo-SecureString -Key $k.",
            ),
            (
                "connection_string_password",
                "the password policy requires 12 characters",
            ),
            ("connection_string_password", "pwd = os.getcwd()"),
            ("connection_string_password", "password = pass;"),
            ("curl_user_credentials", "curl -u is the flag"),
            (
                "powershell_plaintext_secure_string",
                "$pw = ConvertTo-SecureString $env:SVC_PASSWORD -AsPlainText -Force",
            ),
            ("cli_secret_flag", "--password-file /run/secrets/db"),
            // -p alone prompts; elsewhere it is a port or a path.
            ("cli_password_short_flag", "mysql -u root -p orders"),
            ("cli_password_short_flag", "docker run -p 8080:80 nginx"),
            ("cli_password_short_flag", "ssh -p 2222 bob@host"),
            ("cli_password_short_flag", "mkdir -p /var/lib/mysql"),
            ("cli_password_client_flag", "redis-cli -h cache --askpass ping"),
            ("cli_password_client_flag", "keytool -list -keystore k.jks -storepass:env STOREPASS"),
            ("cli_password_client_flag", "unzip -P archive.zip"),
            ("cli_password_client_flag", "7z x backup.7z -p"),
            ("cli_password_client_flag", "ssh-keygen -t ed25519 -N '' -f key"),
            ("cli_password_client_flag", "ssh-keygen -p -f key"),
            ("cli_password_client_flag", "az login --use-device-code"),
            ("cli_password_client_flag", "smbclient //fs/share -U bob"),
            ("cli_password_client_flag", "lftp -u bob sftp://files.example.com"),
            ("cli_password_client_flag", "gzip -P file"),
            ("cli_password_client_flag", "mosquitto_sub -h broker -t 'a/#' -v"),
            ("cli_password_positional", "echo \"$USER:$PASS\" | chpasswd"),
            ("cli_password_positional", "rabbitmqctl list_users"),
            ("cli_password_positional", "mc alias set myminio http://minio:9000"),
            ("cli_password_positional", "mc alias set myminio http://minio:9000 admin"),
            ("cli_password_positional", "mc alias list"),
            ("cli_password_positional", "echo $TOKEN | docker login -u bob --password-stdin"),
            ("cli_password_positional", "cat pw.txt | docker login -u bob --password-stdin"),
            ("cli_password_positional", "docker login -u bob --password-stdin < pw.txt"),
            ("cli_password_positional", "openssl passwd -stdin < list.txt"),
            ("cli_password_positional", "openssl passwd -6 $PASSWORD"),
            ("cli_password_client_flag", "openssl enc -d -aes-256-cbc -kfile key.txt -in a"),
            ("cli_password_client_flag", "sqlplus /nolog"),
            ("cli_password_client_flag", "sqlplus / as sysdba"),
            ("call_positional_password", "l.simple_bind_s(who, cred)"),
            ("cli_password_client_flag", "zip -r backup.zip data"),
            ("one_time_code", "the verification code expired after 300 seconds: request 0000 again"),
            ("one_time_code", "security code review #4821-b"),
            ("one_time_code", "OTP length is 6 digits; login code 1234.5 ms"),
            ("account_recovery_codes", "Store your recovery codes in a safe place."),
            ("account_recovery_codes", "backup codes generated: 10, used: 2, at 2026-12-06"),
            ("go_sql_dsn_password", "db, err := sql.Open(\"mysql\", dsn) // user@tcp(host)/db"),
            ("go_sql_dsn_password", "listening on 0.0.0.0:8080@tcp(ready)"),
            ("cli_password_client_flag", "redis-cli info | grep -a keyspace_hits2"),
            ("cli_password_client_flag", "wget https://example.com/files/data.zip -P /opt/datasets"),
            ("cli_password_client_flag", "cp dist.zip -P target/release"),
            ("cli_password_client_flag", "Downloaded model.7z and ran rsync -partial-dir=cache2 x"),
            ("cli_password_client_flag", "7z x a.7z -o/out\", \"gcc -pthread -O2"),
            ("call_positional_password", "t.login(\"title\", \"Sign in to continue\")"),
            ("call_positional_password", "analytics.login(\"method\", \"google_oauth2\")"),
            ("call_positional_password", "router.login(\"/login\", \"LoginPageV2\")"),
            ("call_positional_password", "getConnection(url, \"SELECT 1\", \"ping_v2\")"),
            ("cli_password_positional", "htpasswd -B -c .htpasswd admin"),
            ("cli_password_positional", "htpasswd -D .htpasswd admin"),
            ("cli_password_positional", "net user bob /delete"),
            ("cli_password_positional", "net user administrator * /domain"),
            ("cli_password_positional", "The net user growth was strong this quarter."),
            ("cli_password_positional", "echo \"$SUDO_PASSWORD\" | sudo -S true"),
            ("cli_password_positional", "echo hello | sudo tee /etc/motd"),
            ("call_positional_password", "client.login(user, password)"),
            ("call_positional_password", "client.login(\"bob\", \"<password>\")"),
            ("call_positional_password", "DriverManager.getConnection(url, user, pass)"),
            ("call_positional_password", "ftp.login(\"anonymous\", \"\")"),
            ("cli_password_short_flag", "docker login -u bob --password-stdin registry.example.com"),
            ("secret_key_assignment", "TOKEN_COUNT is an integer"),
            (
                "url_secret_query_param",
                "https://example.com/?page=2&sort=asc",
            ),
            ("secret_key_assignment", "max_tokens: 4096"),
            ("secret_key_assignment", "token = \"${DEPLOY_TOKEN}\""),
            (
                "secret_key_assignment",
                "access_token_url='https://github.com/login/oauth/access_token'",
            ),
            (
                "secret_key_assignment",
                "credentialsId: 'ff083f76-7804-4ef1-80e4-fe975bb9141b'",
            ),
            (
                "secret_key_assignment",
                "LLM_SECRET_NAME = \"NEXUS-GPT4-API-KEY\"",
            ),
            (
                "secret_key_assignment",
                "secret_length = X25519.secret_length",
            ),
            (
                "secret_key_assignment",
                "# API Token https://huggingface.co/settings/tokens",
            ),
            (
                "secret_key_assignment",
                "publicToken = \"9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit\"",
            ),
            ("secret_key_assignment", "secretKey: api-key"),
            ("onepassword_secret_key", "A3-1234 is a sheet size"),
            (
                "onepassword_service_account_token",
                "ops_eyJ is only a prefix",
            ),
            ("age_secret_key", "AGE-SECRET-KEY-1 followed by nothing"),
            (
                "notion_api_token",
                "ntn_ too short ntn_123, secret_key_base and secret_abc",
            ),
            ("sourcegraph_access_token", "sgp_local is a name"),
            ("intra42_client_secret", "s-s4t2ud- cut short"),
            ("facebook_access_token", "EAAC certification body"),
            ("alibaba_access_key_id", "LTAI short and LTAIabcdefghijklmn (14)"),
            ("phone_number_in_context", "call 12 retried 3 times"),
            ("harness_api_key", "compat.mode.enabled"),
            (
                "high_entropy_near_keyword",
                "trace key 4bf92f3577b34da6a3ce929d0e0e4736",
            ),
            ("email_address", "user at example dot com; @mention; a@b"),
            ("phone_number_international", "+1 more"),
            ("phone_number_north_american", "ORD-415-555-0132"),
            ("payment_card_number", "4111 1111 1111 1112"),
            ("iban", "GB82 WEST 1234 5698 7654 33"),
            ("us_social_security_number", "000-12-3456"),
            ("ipv4_address", "version 1.2.3.4.5 of the tool"),
            ("ipv6_address", "12:30:45"),
            // Loopback and documentation addresses name no one and stay readable.
            ("ipv4_address", "postgres on 127.0.0.1:5432, docs use 192.0.2.10 and 203.0.113.7"),
            ("ipv4_address", "listen 0.0.0.0:8080, broadcast 255.255.255.255"),
            ("ipv6_address", "bind [::1]:4317 or 2001:db8:85a3::8a2e:370:7334"),
        ]
    }

    /// Look-alikes no rule may fire on.
    const LOOK_ALIKES: &[&str] = &[
        "request 6f9619ff-8b86-d011-b42d-00cf4fc964ff",
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "commit da39a3ee5e6b4b0d3255bfef95601890afd80709",
        "2026-11-30T05:17:14.133Z",
        "at 1767225600000000000 ns",
        "order ORD-00012345 shipped",
        "version 2.3.0 (build 1.4.2)",
        "aGVsbG8gd29ybGQsIHRoaXMgaXMgb3JkaW5hcnkgdGV4dA==",
        "{\"order_id\":\"ORD-1\",\"amount_cents\":1250,\"status\":\"refunded\"}",
        "gen_ai.usage.input_tokens 1200",
    ];

    #[test]
    fn every_rule_has_a_description_and_examples_both_ways() {
        let tps = true_positives();
        let fps = false_positives();
        for d in DETECTORS {
            assert!(!d.description.is_empty(), "{}", d.id);
            assert!(
                tps.iter().any(|(r, _, _)| *r == d.id),
                "{} has no true positive",
                d.id
            );
            assert!(
                fps.iter().any(|(r, _)| *r == d.id),
                "{} has no false positive",
                d.id
            );
        }
        assert!(DETECTORS.len() >= 40, "{} detectors", DETECTORS.len());
    }

    /// A Unicode `\b` makes the regex crate's lazy DFA give up on any text holding a byte
    /// outside ASCII, and the search run in the PikeVM (the corpus mix cost 1,745 M
    /// instructions against 1,024 M with ASCII boundaries).
    #[test]
    fn every_word_boundary_is_ascii() {
        for d in DETECTORS {
            let rest = d.regex.replace(r"(?-u:\b)", "");
            assert!(!rest.contains(r"\b"), "{}: a Unicode \\b", d.id);
        }
    }

    #[test]
    fn alternative_shapes_each_have_their_group() {
        let specs = default_detectors();
        let groups = |id: &str| {
            specs
                .iter()
                .find(|s| s.id == id)
                .map(|s| s.alternate_groups.clone())
                .expect("a catalogue rule")
        };
        assert_eq!(groups("connection_string_password"), [2]);
        assert_eq!(groups("powershell_plaintext_secure_string"), [2]);
        assert_eq!(
            groups("cli_password_positional"),
            (2..=9).collect::<Vec<_>>()
        );
        assert_eq!(
            groups("cli_password_client_flag"),
            (2..=15).collect::<Vec<_>>()
        );
        assert!(groups("bearer_token").is_empty());
    }

    #[test]
    fn every_rule_is_documented() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/redaction-rules.md"),
        )
        .expect("schemas/redaction-rules.md");
        for d in DETECTORS {
            assert!(
                doc.contains(&format!("| `{}` | {} |", d.id, d.description)),
                "{}",
                d.id
            );
        }
        for k in default_key_rules() {
            assert!(doc.contains(&format!("| `{}` |", k.id)), "{}", k.id);
        }
        let count = format!(
            "{} detectors and {} key rules",
            DETECTORS.len(),
            default_key_rules().len()
        );
        assert!(doc.contains(&count), "the count line should read {count:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// `high_entropy_near_keyword` never matches a text without the run of token
        /// characters its gate asks for: text around its keywords, runs of token characters
        /// short and long, breaks, and letters outside ASCII.
        #[test]
        fn the_token_run_gate_never_turns_away_a_match(
            parts in proptest::collection::vec(
                "(secret|TOKEN|api_key|Access-Key|privatekey|credential|[A-Za-z0-9+/_-]{1,30}|[ :=\"'.,\n]{1,3}|ſ|\u{212A}|é|={1,2})",
                0..12,
            )
        ) {
            let text: String = parts.concat();
            let d = DETECTORS
                .iter()
                .find(|d| d.id == "high_entropy_near_keyword")
                .expect("in the catalogue");
            let need = min_token_run(d.id, d.regex);
            proptest::prop_assert_eq!(need, 24);
            let matched = regex::Regex::new(d.regex).expect("compiles").is_match(&text);
            proptest::prop_assert!(
                !matched || crate::protect::validators::token_run_outside(&text, |_| false),
                "{:?}", text
            );
        }
    }

    /// A keyword of two bytes stands in the keyword pass's trigram table under every third
    /// byte, and one of one byte is compared at every byte: each must be one its detector
    /// cannot do without. `sk` (Twilio's `SK` and 32 hex digits, now `sk0`…`skf`) walked the
    /// keyword automaton at every "task", "ask" and "sku".
    #[test]
    fn keywords_of_two_bytes_or_less_are_those_nothing_longer_replaces() {
        let mut short: Vec<(&str, &str)> = DETECTORS
            .iter()
            .flat_map(|d| {
                d.keywords
                    .iter()
                    .filter(|k| k.len() <= 2)
                    .map(|k| (d.id, *k))
            })
            .collect();
        short.sort_unstable();
        assert_eq!(
            short,
            [
                // `…Q~…`: the marker is two bytes, its neighbours any token character.
                ("azure_ad_client_secret", "q~"),
                // `-u user:pass` after any whitespace, Unicode's included.
                ("curl_user_credentials", "-u"),
                ("email_address", "@"),
            ]
        );
    }

    #[test]
    fn a_changed_regex_keeps_no_token_run_gate() {
        assert_eq!(
            min_token_run("high_entropy_near_keyword", "(?i)token(.+)"),
            0
        );
        assert_eq!(min_token_run("email_address", "@"), 0);
    }

    #[test]
    fn a_verified_rule_and_its_unverified_twin_share_one_search() {
        let valid = valid_github("ghp_");
        let shape = format!("ghp_{}", cycle(B62, 36));
        let text = format!("a {valid} and {shape}.");
        let named = |r: &Redactor| -> Vec<(String, String)> {
            r.scan(&text)
                .iter()
                .map(|f| (f.rule.to_string(), text[f.start..f.end].to_string()))
                .collect()
        };
        // One regex search names each match as the two rules did apart.
        assert_eq!(
            named(&redactor()),
            [
                ("github_token".to_string(), valid.clone()),
                ("github_token_unverified".to_string(), shape.clone()),
            ]
        );
        // With the verified rule switched off, the twin searches on its own.
        let config = RedactionConfig {
            disabled_rules: vec!["github_token".into()],
            ..RedactionConfig::default()
        };
        let r = Redactor::new(&config, KeyedHasher::new(b"test")).expect("compiles");
        assert_eq!(
            named(&r),
            [
                ("github_token_unverified".to_string(), valid),
                ("github_token_unverified".to_string(), shape),
            ]
        );
    }

    #[test]
    fn true_positives_are_found_under_their_rule() {
        let r = redactor();
        for (rule, text, secret) in true_positives() {
            let findings = r.scan(&text);
            let at = text.find(&secret).expect("secret in text");
            let hit = findings
                .iter()
                .find(|f| f.start <= at && f.end >= at + secret.len());
            assert!(
                hit.is_some_and(|f| &*f.rule == rule),
                "{rule}: expected {secret:?} in {text:?}, found {:?}",
                findings
                    .iter()
                    .map(|f| (&*f.rule, &text[f.start..f.end]))
                    .collect::<Vec<_>>()
            );
            let mut hits = Default::default();
            let out = r.redact_text(&text, &mut hits).expect("changed");
            assert!(!out.contains(&secret), "{rule}: {out}");
        }
    }

    #[test]
    fn false_positives_do_not_fire_their_rule() {
        let r = redactor();
        for (rule, text) in false_positives() {
            let findings = r.scan(text);
            assert!(
                findings.iter().all(|f| &*f.rule != rule),
                "{rule} fired on {text:?}: {:?}",
                findings
                    .iter()
                    .map(|f| (&*f.rule, &text[f.start..f.end]))
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn look_alikes_fire_no_rule() {
        let r = redactor();
        for text in LOOK_ALIKES {
            let findings = r.scan(text);
            assert!(
                findings.is_empty(),
                "{text:?}: {:?}",
                findings
                    .iter()
                    .map(|f| (&*f.rule, &text[f.start..f.end]))
                    .collect::<Vec<_>>()
            );
        }
    }

    /// The shapes a held-out corpus of real repositories showed missed and destroyed (issue
    /// 36), written from the shapes with values of our own: each missed shape loses exactly its
    /// secret, each destroyed shape comes out as it went in.
    #[test]
    fn credentials_missed_and_harmless_values_destroyed_before_go_the_right_way() {
        let r = redactor();
        let redacted = |text: &str| {
            let mut hits = Default::default();
            r.redact_text(text, &mut hits)
                .unwrap_or_else(|| text.to_string())
        };
        let k = "[REDACTED:secret_key_assignment]";
        for (text, expected) in [
            (
                "# nats: SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM".to_string(),
                "# nats: [REDACTED:nats_nkey_seed_checked]".to_string(),
            ),
            (
                "const jwk = { kty: 'oct', k: 'GawgguFyGrWKav7AX4VKUg7xW8nK3dRdB9d4kO3nXHc' };".into(),
                "const jwk = { kty: 'oct', k: '[REDACTED:jwk_private_key]' };".into(),
            ),
            (
                "Authorization: OAuth oauth_consumer_key=\"xvz1evFS4wEEPTGEFPHBog\", oauth_signature=\"tnnArxj06cWHq44gCs1OSKk%2FjY%3D\"".into(),
                format!("Authorization: OAuth oauth_consumer_key=\"{k}\", oauth_signature=\"{k}\""),
            ),
            (
                "GET /cb?oauth_token=Z6eEdO8MOmk394WozF5oKyuAv855&oauth_token_secret=Kd75W4OQfb2oJTV0vzGz".into(),
                format!("GET /cb?oauth_token={k}&oauth_token_secret={k}"),
            ),
            // Commented out, a setting is still a setting.
            ("# AMQP_PASSWORD = yiwzi".into(), format!("# AMQP_PASSWORD = {k}")),
            ("// smtp_pass = qorvend".into(), format!("// smtp_pass = {k}")),
            ("{user: bob, password: djqnnwu}".into(), format!("{{user: bob, password: {k}}}")),
            (
                "To set auth token 4f3c2a1b9e8d7c6b5a49382716f5e4d3c2b1a09f8e7d6c5b4a3928171605f4e3".into(),
                format!("To set auth token {k}"),
            ),
            ("OVH_APPLICATION_KEY=6502241089672483 \\".into(), format!("OVH_APPLICATION_KEY={k} \\")),
            // Positional credentials.
            (
                "requests.get(url, auth=('bob', 'Xk9mP2qLw'))".into(),
                format!("requests.get(url, auth=('bob', '{k}'))"),
            ),
            (
                "HTTPBasicAuth('admin', 'S3cr3tPassw0rd')".into(),
                format!("HTTPBasicAuth('admin', '{k}')"),
            ),
            (
                "req.SetBasicAuth(\"admin\", \"S3cr3tPassw0rd\")".into(),
                format!("req.SetBasicAuth(\"admin\", \"{k}\")"),
            ),
            (
                "htpasswd -b /etc/nginx/.htpasswd admin Vd8kLm2Zqr".into(),
                "htpasswd -b /etc/nginx/.htpasswd admin [REDACTED:cli_password_positional]".into(),
            ),
            (
                "client.login(\"bob\", \"hunter2Qx\")".into(),
                "client.login(\"bob\", \"[REDACTED:call_positional_password]\")".into(),
            ),
        ] {
            assert_eq!(redacted(&text), expected, "{text}");
        }
        for text in [
            // Placeholders.
            "Authorization: Basic login_and_password_removed",
            "password: some-password",
            "token: <token>",
            // Labels, in several languages, under credential names.
            "\"LABEL_CONFIRM_CURRENT_PASSWORD\": \"Confirm your current password\"",
            "'Password' => 'Wachtwoord'",
            "'password' => 'Passwort:'",
            "password: Contraseña",
            "\"รหัสผ่าน\": \"กรุณาใส่รหัสผ่าน\"",
            "'password' => 'كلمة المرور الحالية'",
            // Code.
            "$token = $this->getSupportedToken();",
            "$this->createMock(TokenInterface::class)",
            "Key string `key:\",optional\"`",
            "if (u.password === password) {",
            "cmd = \"SA_PASSWORD=\" + pw",
            "PASSWORD=O$(openssl rand -base64 6 | tr -d \"=+/\")_1",
            // Markup, settings, constants and error tables.
            "<a-menu-item key=\"/account/settings/custom\">",
            "{ \"key\": \"Access-Control-Allow-Origin\", \"value\": \"*\" }",
            "WIN_SECURITY_SET_PASS = 0xf1",
            "ER_TOO_LONG_KEY: \"Specified key was too long; max key length is 767 bytes\"",
            // Comments that are prose, and positional look-alikes.
            "# password = get_password()",
            "requests.get(url, auth=auth)",
            "HTTPBasicAuth(user, password)",
        ] {
            assert_eq!(redacted(text), text, "{text}");
        }
    }

    /// Token formats generated from their published alphabets and lengths (issue 13).
    mod vendor_formats {
        use super::redactor;
        use proptest::prelude::*;

        const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        const UPPER_ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        const LOWER_ALNUM: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
        const HEX: &str = "0123456789abcdef";
        const HEX_MIXED: &str = "0123456789abcdefABCDEF";
        const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
        const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const B64URL_PAD: &str =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-=";
        const B32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

        /// A literal, or a run of `min..=max` characters from an alphabet.
        enum Seg {
            L(&'static str),
            C(&'static str, usize, usize),
            /// A lowercase UUID (8-4-4-4-12 hex).
            Uuid,
        }
        use Seg::{Uuid, C, L};

        const UUID_SEGS: &[Seg] = &[
            C(HEX, 8, 8),
            L("-"),
            C(HEX, 4, 4),
            L("-"),
            C(HEX, 4, 4),
            L("-"),
            C(HEX, 4, 4),
            L("-"),
            C(HEX, 12, 12),
        ];

        /// A rule, a word its format needs nearby (for the context-gated rules), a format.
        struct Format {
            rule: &'static str,
            hint: &'static str,
            segs: &'static [Seg],
        }

        const fn f(rule: &'static str, segs: &'static [Seg]) -> Format {
            Format {
                rule,
                hint: "",
                segs,
            }
        }

        const FORMATS: &[Format] = &[
            f("linear_api_key", &[L("lin_api_"), C(ALNUM, 40, 40)]),
            f("doppler_token", &[L("dp.pt."), C(ALNUM, 40, 44)]),
            f("doppler_token", &[L("dp.st."), C(ALNUM, 40, 44)]),
            f(
                "doppler_token",
                &[
                    L("dp.st."),
                    C("abcdefghijklmnopqrstuvwxyz0123456789_-", 2, 35),
                    L("."),
                    C(ALNUM, 40, 44),
                ],
            ),
            f("doppler_token", &[L("dp.sa."), C(ALNUM, 40, 44)]),
            f("doppler_token", &[L("dp.ct."), C(ALNUM, 40, 44)]),
            f("doppler_token", &[L("dp.scim."), C(ALNUM, 40, 44)]),
            f("doppler_token", &[L("dp.audit."), C(ALNUM, 40, 44)]),
            f("pulumi_access_token", &[L("pul-"), C(HEX, 40, 40)]),
            f(
                "postman_api_key",
                &[
                    L("PMAK-"),
                    C(HEX_MIXED, 24, 24),
                    L("-"),
                    C(HEX_MIXED, 34, 34),
                ],
            ),
            f("databricks_token", &[L("dapi"), C(HEX, 32, 32)]),
            f(
                "databricks_token",
                &[L("dapi"), C(HEX, 32, 32), L("-"), C("0123456789", 1, 1)],
            ),
            f(
                "grafana_cloud_token",
                &[
                    L("glc_eyJ"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-",
                        29,
                        200,
                    ),
                    C("=", 0, 2),
                ],
            ),
            f(
                "grafana_service_account_token",
                &[
                    L("glsa_"),
                    C(ALNUM, 32, 32),
                    L("_"),
                    C("0123456789abcdefABCDEF", 8, 8),
                ],
            ),
            Format {
                rule: "mailgun_api_key",
                hint: "mailgun ",
                segs: &[L("key-"), C(HEX, 32, 32)],
            },
            Format {
                rule: "mailgun_api_key",
                hint: "Mailgun: ",
                segs: &[C(HEX, 32, 32), L("-"), C(HEX, 8, 8), L("-"), C(HEX, 8, 8)],
            },
            Format {
                rule: "nats_nkey_seed",
                hint: "nats ",
                segs: &[L("S"), C("OAUNCPX", 1, 1), C(B32, 56, 56)],
            },
            Format {
                rule: "okta_api_token",
                hint: "okta ",
                segs: &[L("00"), C(B64URL, 40, 40)],
            },
            f("dropbox_access_token", &[L("sl."), C(B64URL_PAD, 130, 200)]),
            f("dropbox_access_token", &[L("sl.u."), C(B64URL, 130, 400)]),
            f(
                "salesforce_access_token",
                &[
                    L("00D"),
                    C(ALNUM, 12, 15),
                    L("!"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.",
                        80,
                        120,
                    ),
                ],
            ),
            f(
                "sentry_token",
                &[L("sntrys_eyJ"), C(B64, 30, 200), L("_"), C(B64, 43, 43)],
            ),
            f("sentry_token", &[L("sntryu_"), C(HEX, 64, 64)]),
            f("supabase_secret_key", &[L("sbp_"), C(HEX, 40, 40)]),
            f("supabase_secret_key", &[L("sb_secret_"), C(B64URL, 24, 64)]),
            f(
                "planetscale_token",
                &[
                    L("pscale_tkn_"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789=_.-",
                        32,
                        64,
                    ),
                ],
            ),
            f(
                "planetscale_token",
                &[
                    L("pscale_pw_"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789=_.-",
                        32,
                        64,
                    ),
                ],
            ),
            f(
                "planetscale_token",
                &[
                    L("pscale_oauth_"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789=_.-",
                        32,
                        64,
                    ),
                ],
            ),
            f("netlify_access_token", &[L("nfp_"), C(ALNUM, 36, 36)]),
            f("figma_access_token", &[L("figd_"), C(B64URL, 40, 80)]),
            f("nuget_api_key", &[L("oy2"), C(LOWER_ALNUM, 43, 43)]),
            f("rubygems_api_key", &[L("rubygems_"), C(HEX, 48, 48)]),
            f("clojars_deploy_token", &[L("CLOJARS_"), C(ALNUM, 60, 60)]),
            f("posthog_personal_api_key", &[L("phx_"), C(ALNUM, 42, 49)]),
            f("posthog_personal_api_key", &[L("phs_"), C(ALNUM, 42, 49)]),
            f("posthog_personal_api_key", &[L("pha_"), C(ALNUM, 40, 64)]),
            f("posthog_personal_api_key", &[L("phr_"), C(ALNUM, 40, 64)]),
            f("xai_api_key", &[L("xai-"), C(ALNUM, 80, 80)]),
            f("new_relic_key", &[L("NRAK-"), C(UPPER_ALNUM, 27, 27)]),
            f("new_relic_key", &[L("NRAA-"), C(HEX, 27, 27)]),
            f("new_relic_key", &[C(HEX, 36, 36), L("NRAL")]),
            f(
                "new_relic_key",
                &[
                    L("NRII-"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-",
                        32,
                        32,
                    ),
                ],
            ),
            f(
                "dynatrace_api_token",
                &[L("dt0c01."), C(ALNUM, 24, 24), L("."), C(ALNUM, 64, 64)],
            ),
            f(
                "tailscale_key",
                &[L("tskey-api-"), C(ALNUM, 6, 20), L("-"), C(ALNUM, 16, 48)],
            ),
            f(
                "tailscale_key",
                &[L("tskey-auth-"), C(ALNUM, 6, 20), L("-"), C(ALNUM, 16, 48)],
            ),
            f(
                "tailscale_key",
                &[
                    L("tskey-client-"),
                    C(ALNUM, 6, 20),
                    L("-"),
                    C(ALNUM, 16, 48),
                ],
            ),
            f(
                "brevo_api_key",
                &[L("xkeysib-"), C(HEX, 64, 64), L("-"), C(ALNUM, 16, 16)],
            ),
            f(
                "brevo_api_key",
                &[L("xsmtpsib-"), C(HEX, 64, 64), L("-"), C(ALNUM, 16, 16)],
            ),
            f(
                "docker_swarm_token",
                &[
                    L("SWMTKN-1-"),
                    C(LOWER_ALNUM, 50, 50),
                    L("-"),
                    C(LOWER_ALNUM, 25, 25),
                ],
            ),
            f("docker_swarm_token", &[L("SWMKEY-1-"), C(B64, 43, 43)]),
            f("sonarqube_token", &[L("squ_"), C(HEX, 40, 40)]),
            f("sonarqube_token", &[L("sqp_"), C(HEX, 40, 40)]),
            f("sonarqube_token", &[L("sqa_"), C(HEX, 40, 40)]),
            Format {
                rule: "twilio_auth_token",
                hint: "twilio ",
                segs: &[C(HEX, 32, 32)],
            },
            Format {
                rule: "cohere_api_key",
                hint: "cohere ",
                segs: &[C(ALNUM, 40, 40)],
            },
            f("tencent_cloud_secret_id", &[L("AKID"), C(ALNUM, 32, 32)]),
            f(
                "firebase_cloud_messaging_server_key",
                &[
                    L("AAAA"),
                    C(B64URL, 7, 7),
                    L(":APA91b"),
                    C(B64URL, 134, 134),
                ],
            ),
            f(
                "jfrog_token",
                &[L("AKCp"), C("0123456789", 1, 1), C(ALNUM, 68, 68)],
            ),
            f("jfrog_token", &[L("cmVmdGtu"), C(ALNUM, 56, 56)]),
            Format {
                rule: "mistral_api_key",
                hint: "mistral ",
                segs: &[C(ALNUM, 32, 32)],
            },
            Format {
                rule: "discord_bot_token",
                hint: "discord ",
                segs: &[
                    C("MNO", 1, 1),
                    C(B64URL, 23, 25),
                    L("."),
                    C(B64URL, 6, 6),
                    L("."),
                    C(B64URL, 27, 38),
                ],
            },
            f("llamacloud_api_key", &[L("llx-"), C(B64URL, 48, 48)]),
            f("openrouter_api_key", &[L("sk-or-v1-"), C(HEX, 64, 64)]),
            f("sk_hex_api_key", &[L("sk-"), C(HEX, 32, 32)]),
            f("nvidia_api_key", &[L("nvapi-"), C(B64URL, 60, 70)]),
            f("cerebras_api_key", &[L("csk-"), C(LOWER_ALNUM, 48, 48)]),
            f(
                "pinecone_api_key",
                &[L("pcsk_"), C(ALNUM, 4, 10), L("_"), C(ALNUM, 50, 80)],
            ),
            f("tavily_api_key", &[L("tvly-"), C(ALNUM, 30, 40)]),
            f("tavily_api_key", &[L("tvly-dev-"), C(ALNUM, 30, 40)]),
            f(
                "langsmith_api_key",
                &[L("lsv2_sk_"), C(HEX, 32, 32), L("_"), C(HEX, 10, 10)],
            ),
            f("langfuse_secret_key", &[L("sk-lf-"), Uuid]),
            f("e2b_api_key", &[L("e2b_"), C(HEX, 40, 40)]),
            f("firecrawl_api_key", &[L("fc-"), C(HEX, 32, 32)]),
            f("browserbase_api_key", &[L("bb_live_"), C(B64URL, 20, 40)]),
            f("elevenlabs_api_key", &[L("sk_"), C(HEX, 48, 48)]),
            f("axiom_api_token", &[L("xaat-"), Uuid]),
            f("axiom_api_token", &[L("xapt-"), Uuid]),
            f("plaid_access_token", &[L("access-production-"), Uuid]),
            f(
                "mongodb_atlas_service_account_secret",
                &[L("mdb_sa_sk_"), C(B64URL, 20, 100)],
            ),
            Format {
                rule: "airtable_pat",
                hint: "airtable ",
                segs: &[L("pat"), C(ALNUM, 14, 14), L("."), C(HEX, 64, 64)],
            },
            f(
                "atlassian_api_token",
                &[
                    L("ATCTT3xFfGN0"),
                    C(B64URL, 171, 171),
                    L("="),
                    C("0123456789ABCDEF", 8, 8),
                ],
            ),
            f(
                "bitbucket_data_center_token",
                &[
                    L("BBDC-"),
                    C("NMO", 1, 1),
                    C("ADgjQTwz", 1, 1),
                    C(B64, 42, 42),
                ],
            ),
            f("gitlab_token", &[L("GR1348941"), C(B64URL, 20, 30)]),
            f("instagram_access_token", &[L("IGQVJ"), C(B64URL, 100, 250)]),
            f(
                "google_oauth_access_token",
                &[L("ya29."), C(B64URL, 20, 250)],
            ),
            f("amazon_mws_auth_token", &[L("amzn.mws."), Uuid]),
            f("together_api_key", &[L("tgp_v1_"), C(B64URL, 43, 43)]),
            f("wundergraph_cosmo_api_key", &[L("cosmo_"), C(HEX, 32, 32)]),
            f(
                "bitbucket_app_password",
                &[L("ATBB"), C(ALNUM, 24, 24), C("0123456789ABCDEF", 8, 8)],
            ),
            f(
                "google_oauth_client_secret",
                &[L("GOCSPX-"), C(B64URL, 28, 28)],
            ),
            f(
                "grafana_api_key",
                &[L("eyJrIjoi"), C(B64, 40, 400), C("=", 0, 2)],
            ),
            f(
                "dropbox_long_lived_token",
                &[C(ALNUM, 11, 11), L("AAAAAAAAAA"), C(B64URL_PAD, 43, 43)],
            ),
            Format {
                rule: "alibaba_access_key_secret",
                hint: "LTAI5tQ9mX2pL7vR4tY8wN6b ",
                segs: &[C(ALNUM, 30, 30)],
            },
            f(
                "salesforce_consumer_key",
                &[
                    L("3MVG"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._",
                        49,
                        99,
                    ),
                    // A dot ends a sentence, not a key.
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
                        1,
                        1,
                    ),
                ],
            ),
            f("heroku_api_key", &[L("HRKU-"), Uuid]),
            f("docker_pat", &[L("dckr_oat_"), C(B64URL, 27, 40)]),
            f("notion_api_token", &[L("ntn_"), C(ALNUM, 46, 46)]),
            f("notion_api_token", &[L("secret_"), C(ALNUM, 43, 43)]),
            f("supabase_secret_key", &[L("sbp_v0_"), C(HEX, 40, 40)]),
            // Older rules whose alphabets allow `-` and `_` at their ends (once `\b`-anchored,
            // so a token ending in `-` was missed or cut).
            f("heroku_api_key", &[L("HRKU-AA"), C(B64URL, 58, 60)]),
            f("heroku_api_key", &[L("HRKU-"), C(B64URL, 58, 60)]),
            f("square_token", &[L("sq0atp-"), C(B64URL, 22, 60)]),
            f("square_token", &[L("sq0csp-"), C(B64URL, 43, 43)]),
            f(
                "square_token",
                &[
                    L("EAAA"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+=",
                        60,
                        60,
                    ),
                ],
            ),
            f(
                "sendgrid_api_key",
                &[L("SG."), C(B64URL, 22, 22), L("."), C(B64URL, 43, 43)],
            ),
            // Developer platforms' prefixed tokens (issue 36's probes).
            f("contentful_pat", &[L("CFPAT-"), C(B64URL, 43, 43)]),
            f(
                "mapbox_secret_token",
                &[L("sk.eyJ"), C(B64URL, 10, 80), L("."), C(B64URL, 20, 40)],
            ),
            f("prefect_api_key", &[L("pnu_"), C(ALNUM, 36, 36)]),
            f("readme_api_key", &[L("rdme_"), C(LOWER_ALNUM, 70, 70)]),
            f("shippo_api_token", &[L("shippo_live_"), C(HEX, 40, 40)]),
            f("shippo_api_token", &[L("shippo_test_"), C(HEX, 40, 40)]),
            f(
                "typeform_token",
                &[
                    L("tfp_"),
                    C(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.=",
                        59,
                        59,
                    ),
                ],
            ),
            f("adafruit_io_key", &[L("aio_"), C(ALNUM, 28, 28)]),
            f("duffel_token", &[L("duffel_live_"), C(B64URL_PAD, 43, 43)]),
            f("easypost_api_key", &[L("EZAK"), C(ALNUM, 54, 54)]),
            f("easypost_api_key", &[L("EZTK"), C(ALNUM, 54, 54)]),
            f("infracost_api_key", &[L("ico-"), C(ALNUM, 32, 32)]),
            f("buildkite_token", &[L("bkua_"), C(HEX, 40, 40)]),
            f(
                "circleci_pat",
                &[L("CCIPAT_"), C(ALNUM, 22, 22), L("_"), C(HEX, 40, 40)],
            ),
            f("neon_api_key", &[L("napi_"), C(LOWER_ALNUM, 64, 64)]),
            f("flyio_token", &[L("fo1_"), C(B64URL, 43, 43)]),
            f("flyio_token", &[L("fm2_"), C(B64, 100, 300), C("=", 0, 3)]),
            f("flyio_token", &[L("fm1r_"), C(B64, 100, 300), C("=", 0, 3)]),
            f("render_api_key", &[L("rnd_"), C(ALNUM, 32, 32)]),
            f("frameio_token", &[L("fio-u-"), C(B64URL_PAD, 64, 64)]),
            f(
                "vercel_blob_token",
                &[
                    L("vercel_blob_rw_"),
                    C(ALNUM, 16, 16),
                    L("_"),
                    C(ALNUM, 30, 30),
                ],
            ),
            f(
                "google_oauth_refresh_token",
                &[L("1//0"), C(B64URL, 40, 200)],
            ),
            f("linear_oauth_token", &[L("lin_oauth_"), C(HEX, 64, 64)]),
            f("aws_appsync_api_key", &[L("da2-"), C(LOWER_ALNUM, 26, 26)]),
            f(
                "defined_networking_api_key",
                &[L("dnkey-"), C(B32, 26, 26), L("-"), C(B32, 52, 52)],
            ),
            f(
                "twitter_bearer_token",
                &[
                    L("AAAAAAAAAAAAAAAAAAAAA"),
                    C(ALNUM, 8, 40),
                    L("%2B"),
                    C(ALNUM, 40, 80),
                ],
            ),
            f(
                "akamai_edgegrid_token",
                &[
                    L("akab-"),
                    C(LOWER_ALNUM, 16, 16),
                    L("-"),
                    C(LOWER_ALNUM, 16, 16),
                ],
            ),
            f(
                "vercel_token",
                &[L("vcp_"), C(B64URL, 50, 50), C(ALNUM, 6, 6)],
            ),
            f(
                "vercel_token",
                &[L("vck_"), C(B64URL, 50, 50), C(ALNUM, 6, 6)],
            ),
            f(
                "slack_token",
                &[
                    L("xapp-1-A"),
                    C(UPPER_ALNUM, 8, 11),
                    L("-"),
                    C("0123456789", 10, 13),
                    L("-"),
                    C(HEX, 64, 64),
                ],
            ),
        ];

        // A deterministic stream (SplitMix64) from the proptest seed.
        use crate::protect::training::Draw as Rng;

        /// Where a run puts its characters: random, or an edge character (one outside
        /// `[A-Za-z0-9]`, when the alphabet has any) at its start, end or both.
        #[derive(Clone, Copy, Debug)]
        enum Edge {
            Random,
            Start,
            End,
            Both,
        }

        fn token(fmt: &Format, rng: &mut Rng, edge: Edge, len: Option<bool>) -> String {
            let mut t = String::new();
            for seg in fmt.segs {
                push_seg(&mut t, seg, rng, edge, len);
            }
            t
        }

        fn push_seg(t: &mut String, seg: &Seg, rng: &mut Rng, edge: Edge, len: Option<bool>) {
            match *seg {
                L(lit) => t.push_str(lit),
                Uuid => {
                    for s in UUID_SEGS {
                        push_seg(t, s, rng, edge, len);
                    }
                }
                C(alphabet, min, max) => {
                    let chars: Vec<char> = alphabet.chars().collect();
                    let edges: Vec<char> = chars
                        .iter()
                        .copied()
                        .filter(|c| !c.is_ascii_alphanumeric())
                        .collect();
                    let n = match len {
                        Some(false) => min,
                        Some(true) => max,
                        None => min + rng.below(max - min + 1),
                    };
                    for i in 0..n {
                        let at_start = i == 0 && matches!(edge, Edge::Start | Edge::Both);
                        let at_end = i + 1 == n && matches!(edge, Edge::End | Edge::Both);
                        let pool = if (at_start || at_end) && !edges.is_empty() {
                            &edges
                        } else {
                            &chars
                        };
                        t.push(pool[rng.below(pool.len())]);
                    }
                }
            }
        }

        /// The ways a token arrives: a JSON value, an env line, alone, ending a sentence, in
        /// a log line.
        fn contexts(hint: &str, t: &str) -> Vec<String> {
            vec![
                format!("{hint}{{\"key\": \"{t}\"}}"),
                format!("{hint}X={t}"),
                format!("{hint}{t}"),
                format!("{hint}The value is {t}."),
                format!("2026-01-02T03:04:05Z WARN {hint}auth failed token={t} retrying"),
            ]
        }

        /// The token is gone from every context and its own rule fired on it.
        fn check(
            r: &crate::protect::engine::Redactor,
            fmt: &Format,
            t: &str,
        ) -> Result<(), String> {
            for text in contexts(fmt.hint, t) {
                let at = text.find(t).expect("token in text");
                let findings = r.scan(&text);
                let hit = findings
                    .iter()
                    .find(|x| x.start <= at && x.end >= at + t.len());
                if hit.is_none_or(|x| &*x.rule != fmt.rule) {
                    return Err(format!(
                        "{}: {t:?} in {text:?} found as {:?}",
                        fmt.rule,
                        findings
                            .iter()
                            .map(|x| (x.rule.to_string(), text[x.start..x.end].to_string()))
                            .collect::<Vec<_>>()
                    ));
                }
                let mut hits = Default::default();
                let out = r.redact_text(&text, &mut hits).unwrap_or_default();
                if out.contains(t) || !hits.contains_key(fmt.rule) {
                    return Err(format!(
                        "{}: {t:?} survived in {out:?} ({hits:?})",
                        fmt.rule
                    ));
                }
            }
            Ok(())
        }

        #[test]
        fn every_format_names_a_catalogue_rule_and_every_new_rule_has_a_format() {
            let ids: Vec<&str> = super::DETECTORS.iter().map(|d| d.id).collect();
            for fmt in FORMATS {
                assert!(ids.contains(&fmt.rule), "{}", fmt.rule);
            }
            let start = ids
                .iter()
                .position(|i| *i == "linear_api_key")
                .expect("linear");
            let end = ids
                .iter()
                .position(|i| *i == "bearer_token")
                .expect("bearer");
            for id in &ids[start..end] {
                assert!(
                    FORMATS.iter().any(|f| f.rule == *id),
                    "{id} has no generated format"
                );
            }
        }

        /// Shortest and longest, with edge characters at neither, either or both ends.
        #[test]
        fn vendor_formats_hold_at_their_edges() {
            let r = redactor();
            let mut rng = Rng::new(13);
            for fmt in FORMATS {
                for len in [Some(false), Some(true)] {
                    for edge in [Edge::Random, Edge::Start, Edge::End, Edge::Both] {
                        let t = token(fmt, &mut rng, edge, len);
                        if let Err(e) = check(&r, fmt, &t) {
                            panic!("{e} ({edge:?}, {len:?})");
                        }
                    }
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            /// Every rule holds for any token its format allows, in every context.
            #[test]
            fn vendor_formats_hold_for_every_generated_token(seed in any::<u64>(), edge in 0u8..4) {
                let r = redactor();
                let mut rng = Rng::new(seed);
                let edge = [Edge::Random, Edge::Start, Edge::End, Edge::Both][edge as usize];
                for fmt in FORMATS {
                    let t = token(fmt, &mut rng, edge, None);
                    let checked = check(&r, fmt, &t);
                    prop_assert!(checked.is_ok(), "{}", checked.err().unwrap_or_default());
                }
            }
        }
    }
}
