//! The handler URLs a pipeline applied by a client may name (`auth.handler_url_prefixes`):
//! without this, whoever may apply a pipeline could make the stage workers call any address
//! they reach, internal services included.
//!
//! URLs are compared parsed, not as text: a handler URL matches a prefix when its scheme,
//! host and port are the prefix's and its path starts with the prefix's path. So
//! `http://handlers.svc:8080` cannot be extended to `http://handlers.svc:80801/` or
//! `http://handlers.svc:8080@169.254.169.254/`, and a URL with a user name or password is
//! refused whatever the list says.

use url::Url;

use crate::SecurityError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandlerUrls {
    prefixes: Vec<Url>,
}

impl HandlerUrls {
    /// Checks each prefix: an http:// or https:// URL (gRPC handlers' endpoints are too)
    /// with a host and no user name; `field` names the setting.
    pub fn new(prefixes: &[String], field: &str) -> Result<HandlerUrls, SecurityError> {
        let parsed = prefixes
            .iter()
            .enumerate()
            .map(|(i, prefix)| {
                parse(prefix).map_err(|why| {
                    SecurityError::invalid(format!("{field}[{i}]"), format!("'{prefix}' {why}"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(HandlerUrls { prefixes: parsed })
    }

    /// PERMISSION_DENIED when `url` matches no prefix (none when the list is empty).
    pub fn check(&self, url: &str) -> Result<(), SecurityError> {
        let refused = |why: String| {
            Err(SecurityError::Forbidden(format!(
                "handler URL '{url}' {why}"
            )))
        };
        let parsed = match parse(&as_http(url)) {
            Ok(parsed) => parsed,
            Err(why) => return refused(why.to_owned()),
        };
        if self.prefixes.iter().any(|prefix| covers(prefix, &parsed)) {
            return Ok(());
        }
        let allowed = match self.prefixes.is_empty() {
            true => "none is allowed: auth.handler_url_prefixes is empty".to_owned(),
            false => {
                let listed: Vec<&str> = self.prefixes.iter().map(Url::as_str).collect();
                format!("allowed: {}", listed.join(", "))
            }
        };
        refused(format!(
            "starts with none of the prefixes an operator allowed in auth.handler_url_prefixes ({allowed})"
        ))
    }
}

/// A gRPC endpoint's `grpc://` and `grpcs://` are HTTP/2 in plaintext and over TLS: they
/// are compared as the `http://` and `https://` URLs the prefixes are.
fn as_http(url: &str) -> std::borrow::Cow<'_, str> {
    match url.split_once("://") {
        Some(("grpc", rest)) => format!("http://{rest}").into(),
        Some(("grpcs", rest)) => format!("https://{rest}").into(),
        _ => url.into(),
    }
}

/// An http(s) URL with a host and no user name or password.
fn parse(text: &str) -> Result<Url, &'static str> {
    let url =
        Url::parse(text).map_err(|_| "is not a URL such as http://handlers.example.svc:8080/")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must start with http:// or https://");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("names no host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password");
    }
    Ok(url)
}

/// Same scheme, host and port, and a path under the prefix's.
fn covers(prefix: &Url, url: &Url) -> bool {
    prefix.scheme() == url.scheme()
        && prefix.host_str() == url.host_str()
        && prefix.port_or_known_default() == url.port_or_known_default()
        && url.path().starts_with(prefix.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> HandlerUrls {
        HandlerUrls::new(
            &[
                "http://handlers.ns.svc:8080".into(),
                "https://api.example.com/hooks/".into(),
            ],
            "auth.handler_url_prefixes",
        )
        .expect("valid")
    }

    #[test]
    fn urls_must_match_an_allowed_prefix_by_scheme_host_port_and_path() {
        let allowed = allowed();
        for ok in [
            "http://handlers.ns.svc:8080/ship",
            "http://handlers.ns.svc:8080",
            "https://api.example.com/hooks/orders",
            "https://api.example.com:443/hooks/x",
            "grpc://handlers.ns.svc:8080",
            "grpcs://api.example.com:443/hooks/",
        ] {
            allowed.check(ok).expect(ok);
        }
        for bad in [
            "http://169.254.169.254/latest",
            "http://handlers.ns.svc:80801/",
            "http://handlers.ns.svc:8080@169.254.169.254/",
            "http://handlers.ns.svc.evil:8080/",
            "https://handlers.ns.svc:8080/",
            "https://api.example.com/hooksx",
            "https://api.example.com/other",
            "grpcs://handlers.ns.svc:8080",
            "grpc://api.example.com:443/hooks/",
        ] {
            let err = allowed.check(bad).expect_err(bad);
            assert_eq!(err.code(), cascade_core::Code::PermissionDenied, "{bad}");
            assert!(
                err.to_string()
                    .starts_with(&format!("handler URL '{bad}' ")),
                "{err}"
            );
        }
        let none = HandlerUrls::default()
            .check("http://x/")
            .expect_err("empty list");
        assert!(none.to_string().contains("none is allowed"), "{none}");
    }

    #[test]
    fn a_prefix_that_is_no_plain_http_url_is_refused() {
        for bad in ["handlers.svc/", "ftp://x/", "http://", "http://user:pw@h/"] {
            let err = HandlerUrls::new(&[bad.into()], "auth.handler_url_prefixes").expect_err(bad);
            assert!(
                err.to_string()
                    .starts_with("auth.handler_url_prefixes[0]: "),
                "{err}"
            );
        }
    }
}
