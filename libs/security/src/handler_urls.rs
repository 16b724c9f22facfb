//! The handler URLs a pipeline applied by a client may name (`auth.handler_url_prefixes`):
//! without this, whoever may apply a pipeline could make the stage workers call any address
//! they reach, internal services included. Each prefix ends its host part with `/` (or a
//! port), so that `http://handlers.svc/` cannot be extended to `http://handlers.svc.evil/`.

use crate::SecurityError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandlerUrls {
    prefixes: Vec<String>,
}

impl HandlerUrls {
    /// Checks each prefix: an http:// or https:// URL (gRPC handlers' endpoints are too)
    /// whose host is followed by `/` or `:`; `field` names the setting.
    pub fn new(prefixes: &[String], field: &str) -> Result<HandlerUrls, SecurityError> {
        for (i, prefix) in prefixes.iter().enumerate() {
            let bad = |why: &str| {
                SecurityError::invalid(format!("{field}[{i}]"), format!("'{prefix}' {why}"))
            };
            let Some((scheme, rest)) = prefix.split_once("://") else {
                return Err(bad(
                    "is not a URL prefix such as http://handlers.example.svc:8080/",
                ));
            };
            if !["http", "https"].contains(&scheme) {
                return Err(bad("must start with http:// or https://"));
            }
            let host_end = rest.find(['/', ':']);
            match host_end {
                Some(end) if end > 0 => {}
                _ => {
                    return Err(bad(
                        "must end its host with / or a port (http://handlers.example.svc/), so that no other host can start with it",
                    ));
                }
            }
        }
        Ok(HandlerUrls {
            prefixes: prefixes.to_vec(),
        })
    }

    /// PERMISSION_DENIED when `url` starts with no prefix (none when the list is empty).
    pub fn check(&self, url: &str) -> Result<(), SecurityError> {
        if self.prefixes.iter().any(|p| url.starts_with(p.as_str())) {
            return Ok(());
        }
        let allowed = match self.prefixes.is_empty() {
            true => "none is allowed: auth.handler_url_prefixes is empty".to_owned(),
            false => format!("allowed: {}", self.prefixes.join(", ")),
        };
        Err(SecurityError::Forbidden(format!(
            "handler URL '{url}' starts with none of the prefixes an operator allowed in auth.handler_url_prefixes ({allowed})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_start_with_an_allowed_prefix() {
        let allowed = HandlerUrls::new(
            &[
                "http://handlers.ns.svc:8080/".into(),
                "https://api.example.com/hooks/".into(),
            ],
            "auth.handler_url_prefixes",
        )
        .expect("valid");
        allowed
            .check("http://handlers.ns.svc:8080/ship")
            .expect("allowed");
        let err = allowed
            .check("http://169.254.169.254/latest")
            .expect_err("outside");
        assert_eq!(err.code(), cascade_core::Code::PermissionDenied);
        assert!(
            err.to_string().starts_with(
                "handler URL 'http://169.254.169.254/latest' starts with none of the prefixes"
            ),
            "{err}"
        );
        let none = HandlerUrls::default()
            .check("http://x/")
            .expect_err("empty list");
        assert!(none.to_string().contains("none is allowed"), "{none}");
    }

    #[test]
    fn a_prefix_that_another_host_could_extend_is_refused() {
        for bad in [
            "http://handlers.svc",
            "handlers.svc/",
            "ftp://x/",
            "http:///x",
        ] {
            let err = HandlerUrls::new(&[bad.into()], "auth.handler_url_prefixes").expect_err(bad);
            assert!(
                err.to_string()
                    .starts_with("auth.handler_url_prefixes[0]: "),
                "{err}"
            );
        }
    }
}
