//! Who may do what, and over which channel: the security of Cascade's public ports.
//!
//! - [`Identities`]: the identities file (`auth.identities_file`): each identity's bearer
//!   token stored as its SHA-256, the client-certificate names that also prove it, its
//!   [`Grant`]s (a [`Role`] on queue-name patterns) and its [`Quotas`];
//! - [`Authenticator`]: credentials to a [`Caller`], over identities that can be replaced
//!   while it serves (the file reloaded); with authentication off every caller is
//!   [`Caller::Unrestricted`];
//! - [`Caller::check`]: a permission on a queue, denied by default, with a message that
//!   names the identity, the queue and the role missing;
//! - [`EnqueueRates`]: each identity's enqueue rate quota (a token bucket);
//! - [`HandlerUrls`]: the prefixes a pipeline's handler URLs must start with;
//! - [`tls`]: the gRPC port's TLS config (rustls with aws-lc-rs, the one provider), reloaded
//!   when its files change, and the names a client certificate proves;
//! - [`FileSet`]: files watched for changes by whoever reloads them.
//!
//! No network and no runtime: the gateway and the admin ports call into it.

mod authenticate;
mod error;
mod files;
mod grant;
mod handler_urls;
mod identities;
mod quota;
pub mod tls;
mod token;

pub use authenticate::{Authenticator, Caller, Credentials};
pub use error::SecurityError;
pub use files::FileSet;
pub use grant::{Grant, Permission, QueuePattern, Role};
pub use handler_urls::HandlerUrls;
pub use identities::{Identities, Identity};
pub use quota::{EnqueueRates, Quotas};
pub use token::{basic_password, bearer_token, token_sha256};
