//! The command-line flags the service binaries share. Each binary flattens them into its
//! own `clap::Parser` (which says what the binary is) and loads its settings with their
//! overrides: a flag overrides the file and the environment.

use std::path::PathBuf;

/// `--config` and `--http-addr`: every service binary that reads [`Settings`](crate::Settings).
#[derive(Debug, clap::Args)]
pub struct ServiceFlags {
    /// Settings file (TOML, or JSON for a name ending in .json); see deploy/config/cascade.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The HTTP admin address, /healthz and /readyz (http.addr): over the settings file's
    /// [default: the file's, else 127.0.0.1:7701].
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<String>,
}

/// `--data-dir`: a service binary whose shards keep stores (dispatcher, activation timer).
#[derive(Debug, clap::Args)]
pub struct DataFlags {
    /// Where the shards keep their stores (data.dir): over the settings file's [default: the
    /// file's, else ./cascade-data].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl ServiceFlags {
    /// The settings the flags given override, as dotted keys.
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        self.http_addr
            .iter()
            .map(|addr| ("http.addr", addr.clone()))
            .collect()
    }
}

impl DataFlags {
    /// The settings the flags given override, as dotted keys.
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        self.data_dir
            .iter()
            .map(|dir| ("data.dir", dir.display().to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        service: ServiceFlags,
        #[command(flatten)]
        data: DataFlags,
    }

    #[test]
    fn only_the_flags_given_override() {
        let none = Flags::parse_from(["test"]);
        assert!(none.service.overrides().is_empty());
        assert!(none.data.overrides().is_empty());
        let all = Flags::parse_from([
            "test",
            "--config",
            "cascade.toml",
            "--http-addr",
            "0.0.0.0:7701",
            "--data-dir",
            "/srv/cascade",
        ]);
        assert_eq!(all.service.config, Some(PathBuf::from("cascade.toml")));
        assert_eq!(
            all.service.overrides(),
            vec![("http.addr", "0.0.0.0:7701".to_owned())]
        );
        assert_eq!(
            all.data.overrides(),
            vec![("data.dir", "/srv/cascade".to_owned())]
        );
    }
}
