//! The default redaction catalogue: value detectors and key rules that are on with no config.
//!
//! Each detector has an id (stable: it appears in archive rows and metric labels), a one-line
//! description, a regex whose capture group `group` is what gets replaced, keywords for the
//! Aho-Corasick prefilter (a detector runs only on strings that contain one of them; no
//! keywords means it always runs, so those few must be cheap), and an optional validator.
//! The table tests at the bottom give every rule its true and false positives.

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
        regex: r"(?:^|[^A-Za-z0-9])((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})(?:[^A-Za-z0-9]|$)", group: 1, validator: None },
    D { id: "aws_secret_access_key", description: "AWS secret access key next to an aws/secret keyword",
        keywords: &["aws"],
        regex: r#"(?i)aws[a-z0-9_ .\-]{0,25}(?:secret|key)[a-z0-9_ .\-]{0,20}["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)"#, group: 1, validator: None },
    D { id: "aws_bedrock_api_key", description: "Amazon Bedrock API key (ABSK…)",
        keywords: &["absk", "bedrock-api-key-"],
        regex: r"\b((?:ABSK[A-Za-z0-9+/]{100,}={0,2})|(?:bedrock-api-key-[A-Za-z0-9+/=]{100,}))", group: 1, validator: None },
    D { id: "gcp_api_key", description: "Google Cloud / Gemini API key (AIza…)",
        keywords: &["aiza"],
        regex: r"\b(AIza[0-9A-Za-z_\-]{35})(?:[^0-9A-Za-z_\-]|$)", group: 1, validator: None },
    D { id: "gcp_service_account_private_key_id", description: "private_key_id of a Google service-account JSON key",
        keywords: &["private_key_id"],
        regex: r#"private_key_id"\s*:\s*"([a-f0-9]{40})""#, group: 1, validator: None },
    D { id: "azure_storage_account_key", description: "Azure storage AccountKey in a connection string",
        keywords: &["accountkey"],
        regex: r"(?i)AccountKey=([A-Za-z0-9+/]{86}==)", group: 1, validator: None },
    D { id: "azure_ad_client_secret", description: "Azure AD (Entra) client secret (…Q~…)",
        keywords: &["q~"],
        regex: r"(?:^|[^A-Za-z0-9_~.\-])([A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34})(?:[^A-Za-z0-9_~.\-]|$)", group: 1, validator: None },
    D { id: "digitalocean_token", description: "DigitalOcean personal, OAuth or refresh token",
        keywords: &["dop_v1_", "doo_v1_", "dor_v1_"],
        regex: r"\b(do[opr]_v1_[a-f0-9]{64})\b", group: 1, validator: None },
    D { id: "heroku_api_key", description: "Heroku API key (HRKU-…)",
        keywords: &["hrku-"],
        regex: r"\b(HRKU-(?:AA)?[0-9A-Za-z_\-]{58,60})\b", group: 1, validator: None },
    D { id: "cloudflare_origin_ca_key", description: "Cloudflare origin CA key (v1.0-…)",
        keywords: &["v1.0-"],
        regex: r"\b(v1\.0-[a-f0-9]{24}-[a-f0-9]{146})\b", group: 1, validator: None },
    // --- Source hosting and CI ---------------------------------------------------------------
    // Real GitHub and npm tokens carry a CRC32 checksum: a token that passes it fires the
    // verified rule; the same shape without a valid checksum is still removed, under the
    // `_unverified` id, so provenance says how sure the match was.
    D { id: "github_token", description: "GitHub token (ghp_/gho_/ghu_/ghs_/ghr_) with a valid CRC32 checksum",
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        regex: r"\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36})\b", group: 1, validator: Some(Validator::GithubCrc32) },
    D { id: "github_token_unverified", description: "GitHub token shape (ghp_/gho_/ghu_/ghs_/ghr_) without a valid checksum",
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        regex: r"\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36})\b", group: 1, validator: None },
    D { id: "github_fine_grained_pat", description: "GitHub fine-grained personal access token",
        keywords: &["github_pat_"],
        regex: r"\b(github_pat_[A-Za-z0-9_]{82})\b", group: 1, validator: None },
    D { id: "gitlab_token", description: "GitLab personal, pipeline, runner or deploy token (glpat-/glptt-/glrt-/gldt-…)",
        keywords: &["glpat-", "glptt-", "glrt-", "gldt-", "glsoat-", "glcbt-", "glft-", "glimt-", "glagent-", "gloas-", "glrtr-"],
        regex: r"\b((?:glpat|glptt|glrt|glrtr|gldt|glsoat|glcbt|glft|glimt|glagent|gloas)-[A-Za-z0-9_\-.]{20,})", group: 1, validator: None },
    D { id: "npm_token", description: "npm access token (npm_…) with a valid CRC32 checksum",
        keywords: &["npm_"],
        regex: r"\b(npm_[A-Za-z0-9]{36})\b", group: 1, validator: Some(Validator::NpmCrc32) },
    D { id: "npm_token_unverified", description: "npm access token shape (npm_…) without a valid checksum",
        keywords: &["npm_"],
        regex: r"\b(npm_[A-Za-z0-9]{36})\b", group: 1, validator: None },
    D { id: "pypi_token", description: "PyPI upload token",
        keywords: &["pypi-ageichlwas5vcmc"],
        regex: r"\b(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,})", group: 1, validator: None },
    D { id: "atlassian_api_token", description: "Atlassian API token (ATATT…)",
        keywords: &["atatt"],
        regex: r"\b(ATATT[A-Za-z0-9_\-=]{180,})", group: 1, validator: None },
    D { id: "hashicorp_token", description: "HashiCorp Terraform Cloud or Vault token",
        keywords: &[".atlasv1.", "hvs.", "hvb.", "hvr."],
        regex: r"\b([A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}|hv[sbr]\.[A-Za-z0-9_\-]{24,})", group: 1, validator: None },
    D { id: "docker_pat", description: "Docker Hub personal access token",
        keywords: &["dckr_pat_"],
        regex: r"\b(dckr_pat_[A-Za-z0-9_\-]{27,})", group: 1, validator: None },
    // --- LLM providers -----------------------------------------------------------------------
    D { id: "openai_api_key", description: "OpenAI API key (sk-…T3BlbkFJ…, sk-proj-, sk-svcacct-, sk-admin-)",
        keywords: &["sk-"],
        regex: r"(?:^|[^A-Za-z0-9_\-])(sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}|[A-Za-z0-9]{48}))(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "anthropic_api_key", description: "Anthropic API or admin key (sk-ant-…)",
        keywords: &["sk-ant-"],
        regex: r"\b(sk-ant-(?:api|admin|sid)\d{2}-[A-Za-z0-9_\-]{80,})", group: 1, validator: None },
    D { id: "huggingface_token", description: "Hugging Face access or organization token (hf_/api_org_)",
        keywords: &["hf_", "api_org_"],
        regex: r"(?:^|[^A-Za-z0-9_])((?:hf_|api_org_)[A-Za-z]{34})(?:[^A-Za-z0-9_]|$)", group: 1, validator: None },
    D { id: "groq_api_key", description: "Groq API key (gsk_…)",
        keywords: &["gsk_"],
        regex: r"\b(gsk_[A-Za-z0-9]{52})\b", group: 1, validator: None },
    D { id: "perplexity_api_key", description: "Perplexity API key (pplx-…)",
        keywords: &["pplx-"],
        regex: r"\b(pplx-[A-Za-z0-9]{48})\b", group: 1, validator: None },
    D { id: "replicate_api_token", description: "Replicate API token (r8_…)",
        keywords: &["r8_"],
        regex: r"\b(r8_[A-Za-z0-9]{37})\b", group: 1, validator: None },
    // --- Payment providers -------------------------------------------------------------------
    D { id: "stripe_key", description: "Stripe secret or restricted key (sk_/rk_ live/test)",
        keywords: &["sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk_prod_", "rk_prod_"],
        regex: r"\b((?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,99})\b", group: 1, validator: None },
    D { id: "stripe_webhook_secret", description: "Stripe webhook signing secret (whsec_…)",
        keywords: &["whsec_"],
        regex: r"\b(whsec_[A-Za-z0-9+/=]{32,})", group: 1, validator: None },
    D { id: "square_token", description: "Square access token or OAuth secret",
        keywords: &["sq0atp-", "sq0csp-", "eaaa"],
        regex: r"\b(sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,60}|EAAA[A-Za-z0-9_\-+=]{60})\b", group: 1, validator: None },
    D { id: "braintree_access_token", description: "Braintree / PayPal access token",
        keywords: &["access_token$production$"],
        regex: r"(access_token\$production\$[a-z0-9]{16}\$[a-f0-9]{32})", group: 1, validator: None },
    // --- Chat, mail and webhook tokens -------------------------------------------------------
    D { id: "slack_token", description: "Slack bot, user, app, legacy or config token (xox…)",
        keywords: &["xox"],
        regex: r"\b(xox[abeoprs]-(?:\d+-)?[0-9A-Za-z\-]{10,}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+|xoxe\.xox[bp]-\d-[A-Z0-9]{100,})", group: 1, validator: None },
    D { id: "slack_webhook_url", description: "Slack incoming-webhook or workflow URL",
        keywords: &["hooks.slack.com"],
        regex: r"(?i)((?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,})", group: 1, validator: None },
    D { id: "discord_webhook_url", description: "Discord webhook URL",
        keywords: &["discord"],
        regex: r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]{60,})", group: 1, validator: None },
    D { id: "teams_webhook_url", description: "Microsoft Teams / Office 365 webhook URL",
        keywords: &["webhook.office.com", "logic.azure.com"],
        regex: r#"(https://[A-Za-z0-9.\-]+\.(?:webhook\.office\.com/webhookb2|logic\.azure\.com[:0-9]*/workflows)/[^\s"'<>]+)"#, group: 1, validator: None },
    D { id: "telegram_bot_token", description: "Telegram bot token (id:AA…)",
        keywords: &[":aa"],
        regex: r"(?:^|[^0-9])([0-9]{5,16}:AA[A-Za-z0-9_\-]{32,33})(?:[^A-Za-z0-9_\-]|$)", group: 1, validator: None },
    D { id: "sendgrid_api_key", description: "SendGrid API key (SG.…)",
        keywords: &["sg."],
        regex: r"\b(SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})\b", group: 1, validator: None },
    D { id: "twilio_api_key", description: "Twilio API key SID (SK + 32 hex)",
        keywords: &["sk"],
        regex: r"\b(SK[0-9a-fA-F]{32})\b", group: 1, validator: None },
    D { id: "mailchimp_api_key", description: "Mailchimp API key (32 hex + -usN)",
        keywords: &["-us"],
        regex: r"\b([0-9a-f]{32}-us\d{1,2})\b", group: 1, validator: None },
    D { id: "shopify_token", description: "Shopify access token or shared secret",
        keywords: &["shpat_", "shpca_", "shppa_", "shpss_"],
        regex: r"\b(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})\b", group: 1, validator: None },
    // --- Tokens in standard formats ----------------------------------------------------------
    D { id: "jwt", description: "JSON Web Token whose header decodes to JSON with alg",
        keywords: &["eyj"],
        regex: r"\b(ey[A-Za-z0-9_\-]{10,}\.ey[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*)", group: 1, validator: Some(Validator::JwtHeader) },
    D { id: "private_key", description: "Private key in PEM, OpenSSH, PGP or encrypted armour (to END, or to the end of the text if cut)",
        keywords: &["private key"],
        regex: r"(-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,.\\\-]*))", group: 1, validator: None },
    D { id: "putty_private_key", description: "PuTTY private key file (PuTTY-User-Key-File-N)",
        keywords: &["putty-user-key-file"],
        regex: r"(PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC: [0-9a-fA-F]+|$))", group: 1, validator: None },
    // --- Credentials in headers, URLs and command lines --------------------------------------
    D { id: "bearer_token", description: "Bearer credential (Authorization: Bearer …)",
        keywords: &["bearer"],
        regex: r"(?i)\bbearer\s+([A-Za-z0-9_\-.~+/]{12,}=*)", group: 1, validator: None },
    D { id: "basic_auth_credentials", description: "Basic credential that decodes to user:password",
        keywords: &["basic"],
        regex: r"(?i)\bbasic\s+([A-Za-z0-9+/]{6,}={0,2})", group: 1, validator: Some(Validator::BasicAuth) },
    D { id: "url_userinfo_password", description: "Password in a URL's userinfo (scheme://user:password@host)",
        keywords: &["://"],
        regex: r#"(?i)\b[a-z][a-z0-9+.\-]*://[^\s:/@"'<>]+:([^\s/@"'<>]+)@"#, group: 1, validator: None },
    D { id: "connection_string_password", description: "Password in a key=value connection string (Password=…;)",
        keywords: &["password=", "pwd=", "password =", "pwd ="],
        regex: r#"(?i)(?:^|[;\s"'])(?:password|pwd)\s*=\s*([^;\s"']+)"#, group: 1, validator: None },
    D { id: "curl_user_credentials", description: "Credentials on a curl command line (-u user:pass, --user)",
        keywords: &["-u", "--user"],
        regex: r#"(?:^|\s)(?:-u|--user)[\s=]+["']?[^\s:"']*:([^\s"']+)"#, group: 1, validator: None },
    D { id: "cli_secret_flag", description: "Secret passed as a command-line flag (--password=, --token …)",
        keywords: &["-pass", "-pwd", "-token", "-secret", "-api-key", "-apikey", "-access-key", "-auth"],
        regex: r#"(?i)(?:^|\s)--?(?:password|passwd|pass|pwd|token|secret|client-secret|api-key|apikey|access-key|auth-token)(?:=|\s+)["']?([^\s"']{3,})"#, group: 1, validator: None },
    D { id: "env_secret_assignment", description: "Secret in an environment assignment (PGPASSWORD=…, *_TOKEN=…, *_API_KEY=…)",
        keywords: &["password=", "passwd=", "pwd=", "secret=", "token=", "key=", "pass="],
        regex: r#"\b(?:PGPASSWORD|MYSQL_PWD|[A-Z][A-Z0-9_]*(?:PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY|_PASS|_PWD))=("[^"\n]*"|'[^'\n]*'|[^\s"']+)"#, group: 1, validator: None },
    D { id: "url_secret_query_param", description: "Secret in a URL query parameter (token=, sig=, code=, key=, …)",
        keywords: &["token=", "sig=", "signature=", "code=", "key=", "secret=", "password=", "auth=", "credential="],
        regex: r#"(?i)[?&](?:token|access_token|refresh_token|id_token|api_key|apikey|key|sig|signature|x-amz-signature|x-amz-credential|code|secret|client_secret|password|auth|credential)=([^&#\s"'<>]{4,})"#, group: 1, validator: None },
    D { id: "secret_key_assignment", description: "Value under a secret-looking key in JSON, YAML, TOML or .env text",
        keywords: &["secret", "token", "passw", "pwd", "api_key", "apikey", "api-key", "access_key", "private_key", "credential", "auth"],
        regex: r#"(?i)["']?[a-z0-9_.\-]*(?:secret|token|passwd|password|pwd|api[_\-]?key|access[_\-]?key|private[_\-]?key|credential|auth[_\-]?key)[a-z0-9_.\-]*["']?\s*(?::|=|:=|=>)\s*["']?([A-Za-z0-9_\-+/=.~!@#$%^&*:]{6,})"#, group: 1, validator: Some(Validator::SecretLike) },
    D { id: "high_entropy_near_keyword", description: "High-entropy string (over 4.2 bits/char, so not hex) near key/secret/token",
        keywords: &["key", "secret", "token", "credential"],
        regex: r"(?i)(?:key|secret|token|credential)[^\n]{0,24}?(?:^|[^A-Za-z0-9+/_\-])([A-Za-z0-9+/_\-]{24,}={0,2})", group: 1, validator: ENTROPY_4_2 },
    // --- Personal data -----------------------------------------------------------------------
    D { id: "email_address", description: "E-mail address",
        keywords: &["@"],
        regex: r"(?:^|[^A-Za-z0-9._%+\-])([A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24})(?:[^A-Za-z0-9]|$)", group: 1, validator: None },
    D { id: "phone_number_international", description: "Phone number in international form (+CC …)",
        keywords: &["+"],
        regex: r"(?:^|[^\w+])(\+[1-9]\d{0,2}[\s.\-]?(?:\(\d{1,4}\)[\s.\-]?)?\d{1,4}(?:[\s.\-]?\d{2,5}){1,4})(?:[^\w]|$)", group: 1, validator: Some(Validator::PhoneDigits) },
    D { id: "phone_number_north_american", description: "North American phone number ((415) 555-0132, 415-555-0132, 415.555.0132)",
        keywords: &[],
        regex: r"(?:^|[^\w+\-.])((?:1[\s.\-])?(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.\-])[2-9]\d{2}[\s.\-]\d{4})(?:[^\w\-.]|$)", group: 1, validator: None },
    D { id: "payment_card_number", description: "Payment card number (13-19 digits, Luhn-valid, issuer prefix)",
        keywords: &[],
        regex: r"(?:^|[^0-9\-.])([2-6]\d{3}(?:[ \-]?\d{4}){2}[ \-]?\d{1,4}(?:[ \-]?\d{1,3})?)(?:[^0-9\-.]|$)", group: 1, validator: Some(Validator::Luhn) },
    D { id: "iban", description: "International bank account number (mod-97-valid)",
        keywords: &[],
        regex: r"(?:^|[^A-Za-z0-9])([A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})(?:[^A-Za-z0-9]|$)", group: 1, validator: Some(Validator::IbanMod97) },
    D { id: "us_social_security_number", description: "US social security number (AAA-GG-SSSS, issued ranges)",
        keywords: &["-"],
        regex: r"(?:^|[^\d\-])(\d{3}-\d{2}-\d{4})(?:[^\d\-]|$)", group: 1, validator: Some(Validator::UsSsn) },
    D { id: "ipv4_address", description: "IPv4 address (not a longer dotted version string)",
        keywords: &["."],
        regex: r"(?:^|[^\w.])((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})(?:[^\w.]|\.(?:\s|$)|$)", group: 1, validator: None },
    D { id: "ipv6_address", description: "IPv6 address (full, or compressed with at least two groups)",
        keywords: &[":"],
        regex: r"(?:^|[^\w:])((?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|(?:[0-9a-fA-F]{1,4}:){2,6}:(?:[0-9a-fA-F]{1,4}:){0,5}[0-9a-fA-F]{1,4})(?:[^\w:]|$)", group: 1, validator: Some(Validator::Ipv6) },
];

/// The default detectors as specs.
pub fn default_detectors() -> Vec<DetectorSpec> {
    DETECTORS
        .iter()
        .map(|d| DetectorSpec {
            id: d.id.to_string(),
            description: d.description.to_string(),
            regex: d.regex.to_string(),
            keywords: d.keywords.iter().map(|k| k.to_string()).collect(),
            group: d.group,
            validator: d.validator,
            action: Action::Mask,
        })
        .collect()
}

/// Keys whose whole value is a credential, whatever it looks like.
pub fn default_key_rules() -> Vec<KeyRuleSpec> {
    vec![
        KeyRuleSpec {
            id: "credential_key".into(),
            description: "Attribute or JSON key that names a credential".into(),
            keys: [
                "*password*", "*passwd*", "*secret*", "*api_key*", "*apikey*", "*api-key*",
                "*access_token*", "*refresh_token*", "*id_token*", "*auth_token*",
                "*session_token*", "*private_key*", "*client_secret*", "*credential*",
                "token", "*.token", "authorization", "*.authorization", "proxy-authorization",
                "*.proxy-authorization", "cookie", "*.cookie", "set-cookie", "*.set-cookie",
                "x-api-key", "*.x-api-key",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            action: Action::Mask,
        },
    ]
}
