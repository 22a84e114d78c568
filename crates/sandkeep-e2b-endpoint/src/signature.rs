//! Signed `/files` URLs, as the SDKs make them from a sandbox's access
//! token (`download_url`, `upload_url`): `signature=v1_` + unpadded base64
//! of `sha256("PATH:OPERATION:USER:TOKEN")`, with `:EXPIRATION` (Unix
//! seconds) appended when `signature_expiration` is given; `USER` is empty
//! for the sandbox's default user. A valid, unexpired signature stands in
//! for the access token on that one path and operation.
//!
//! A signed URL carries no sandbox id (the SDKs build it on
//! `E2B_SANDBOX_URL`, without the routing header), so the signature also
//! names its sandbox: the one whose token makes it.

use sha2::{Digest, Sha256};

/// What a signed request asks for.
pub struct Signed<'a> {
    pub path: &'a str,
    /// `read` (GET) or `write` (POST).
    pub operation: &'a str,
    pub user: &'a str,
    pub signature: &'a str,
    pub expiration: Option<&'a str>,
}

/// Why a signature does not let a request in.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    Expired,
    Invalid,
}

impl Refused {
    /// envd's message for it.
    pub fn message(&self) -> &'static str {
        match self {
            Self::Expired => "signature is already expired",
            Self::Invalid => "invalid signature",
        }
    }
}

impl Signed<'_> {
    /// The signature `token` makes for this request.
    fn expected(&self, token: &str) -> String {
        use base64::Engine as _;
        let raw = match self.expiration {
            None => format!("{}:{}:{}:{token}", self.path, self.operation, self.user),
            Some(exp) => format!(
                "{}:{}:{}:{token}:{exp}",
                self.path, self.operation, self.user
            ),
        };
        let digest = Sha256::digest(raw.as_bytes());
        format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
        )
    }

    /// Whether `token` made this signature.
    pub fn made_by(&self, token: &str) -> bool {
        super::same(&self.expected(token), self.signature)
    }

    /// Whether the signature, made by `token`, is good now (`now` in Unix
    /// seconds).
    pub fn check(&self, token: &str, now: u64) -> Result<(), Refused> {
        if !self.made_by(token) {
            return Err(Refused::Invalid);
        }
        match self.expiration.map(str::parse::<u64>) {
            None => Ok(()),
            Some(Ok(exp)) if exp >= now => Ok(()),
            Some(Ok(_)) => Err(Refused::Expired),
            Some(Err(_)) => Err(Refused::Invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_signature_is_checked_with_its_expiry() {
        // The Python SDK's get_signature("a.txt", "read", "user", "tok", …).
        let signed = |signature: &'static str, expiration| Signed {
            path: "a.txt",
            operation: "read",
            user: "user",
            signature,
            expiration,
        };
        let good = signed("v1_", None).expected("tok");
        let s = Signed {
            signature: &good,
            ..signed("", None)
        };
        // What the Python SDK 2.63 computes for these.
        assert_eq!(good, "v1_wPjHOh/p+K3FbqiyGd5vwPNc/g4IPd8sigMxb1gqu9I");
        assert_eq!(s.check("tok", 0), Ok(()));
        assert_eq!(s.check("other", 0), Err(Refused::Invalid));
        let timed = signed("", Some("100")).expected("tok");
        let t = Signed {
            signature: &timed,
            ..signed("", Some("100"))
        };
        assert_eq!(t.check("tok", 100), Ok(()));
        assert_eq!(t.check("tok", 101), Err(Refused::Expired));
        let write = Signed {
            operation: "write",
            ..Signed {
                signature: &good,
                ..signed("", None)
            }
        };
        assert_eq!(write.check("tok", 0), Err(Refused::Invalid));
    }
}
