//! What HAProxy 2.6 and nginx 1.22 (Debian 12, OpenSSL 3.0, default security level 2)
//! load, as rules over parsed X.509 certificates and private keys.
//!
//! Found with the real `haproxy -c` and `nginx -t` on a minimal config that loads the
//! certificate (`actor/tests/cert_acceptance.rs` runs the same spread, generated with the
//! `openssl` CLI at test time, and shows [`super::inspect`] refuses exactly what either
//! proxy refuses, plus the documented k8slb policy refusals below). Both proxies refuse:
//!
//! - a `CERTIFICATE` block that does not decode (OpenSSL stops at it and fails the file);
//!   the leaf's DER followed by extra bytes;
//! - a key that does not match the leaf certificate (RSA, EC on every curve, Ed25519; an
//!   encrypted key, which would need a passphrase);
//! - on **any** certificate of the chain, leaf or CA: an RSA or DSA key under about 1,965
//!   bits (OpenSSL 3.0's strength formula: 1,960 bits refused, 1,968 loaded; 2,047 loads)
//!   and an EC key under 224 bits (P-192);
//! - on any certificate that is not self-signed (leaf or CA): a signature with MD5 or
//!   SHA-1 (OpenSSL counts them 39 and 63 bits, level 2 needs 112); SHA-224 and stronger
//!   load. A self-signed certificate's own signature is not checked (a SHA-1 self-signed
//!   leaf or root loads); "self-signed" is OpenSSL's: issuer = subject, the authority key
//!   id (if any) names the subject key id, and the signature's key type is the
//!   certificate's (not a verification of the signature: an ECDSA-with-SHA3 self-signed
//!   certificate is refused, OpenSSL 3.0 does not know that algorithm's key type).
//!
//! Both proxies load, and k8slb still refuses (policy, said in the message):
//!
//! - keys that are neither RSA (2,048 to 8,192 bits, two primes), ECDSA on P-256, P-384
//!   or P-521 (named curve) nor Ed25519, on any certificate of the chain: DSA, Ed448,
//!   RSA-PSS keys, secp224r1, secp256k1 and brainpool curves (not usable in TLS 1.3, or
//!   not checkable here); RSA keys over 8,192 bits (each handshake would cost every node
//!   seconds of CPU); RSA keys between 1,968 and 2,047 bits;
//! - signature algorithms other than RSA PKCS#1 v1.5 and RSA-PSS with SHA-224 to SHA-512,
//!   ECDSA with SHA-224 to SHA-512, Ed25519 and Ed448 (the SHA-3 ones, which OpenSSL 3.0
//!   knows for RSA only), on certificates that are not self-signed;
//! - PEM labels other than `CERTIFICATE` in `tls.crt` (`TRUSTED CERTIFICATE` and
//!   `X509 CERTIFICATE` load), bytes after a CA certificate's DER (OpenSSL ignores them),
//!   more than one key in `tls.key` (OpenSSL takes the first), keys with explicit curve
//!   parameters.
//!
//! And what k8slb checks beyond OpenSSL's load: an RSA key's own consistency (n = pq, d
//! the inverse of e modulo p-1 and q-1, the CRT values), an EC key's embedded public
//! point being its private scalar's, so the key that matches is also one that signs.

use num_bigint::BigUint;
use x509_parser::prelude::*;

/// A public key k8slb serves, as found in a certificate or derived from a private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PublicKey {
    Rsa { n: BigUint, e: BigUint },
    P256(p256::PublicKey),
    P384(p384::PublicKey),
    P521(p521::PublicKey),
    Ed25519(Vec<u8>),
}

/// The RSA modulus sizes served.
const RSA_MIN_BITS: u64 = 2048;
const RSA_MAX_BITS: u64 = 8192;

const SERVED: &str =
    "k8slb serves RSA (2048 to 8192 bits), ECDSA (P-256, P-384, P-521) and Ed25519 keys";

mod oid {
    pub const RSA: &str = "1.2.840.113549.1.1.1";
    pub const RSA_PSS: &str = "1.2.840.113549.1.1.10";
    pub const EC: &str = "1.2.840.10045.2.1";
    pub const ED25519: &str = "1.3.101.112";
    pub const ED448: &str = "1.3.101.113";
    pub const DSA: &str = "1.2.840.10040.4.1";
    pub const P256: &str = "1.2.840.10045.3.1.7";
    pub const P384: &str = "1.3.132.0.34";
    pub const P521: &str = "1.3.132.0.35";
    pub const AKID: &str = "2.5.29.35";
    pub const SKID: &str = "2.5.29.14";
}

/// A dotted OID from the input, bounded for a message.
fn short_oid(o: &str) -> String {
    if o.len() <= 40 {
        o.to_string()
    } else {
        format!("{}...", &o[..40])
    }
}

/// The key type a key algorithm (and, for EC, its curve) names, or why it is not served.
fn key_kind(alg: &str, curve: Option<&str>) -> Result<KeyKind, String> {
    match (alg, curve) {
        (oid::RSA, _) => Ok(KeyKind::Rsa),
        (oid::ED25519, _) => Ok(KeyKind::Ed25519),
        (oid::EC, Some(oid::P256)) => Ok(KeyKind::P256),
        (oid::EC, Some(oid::P384)) => Ok(KeyKind::P384),
        (oid::EC, Some(oid::P521)) => Ok(KeyKind::P521),
        (oid::EC, Some("1.2.840.10045.3.1.1")) => Err(
            "an ECDSA key on P-192, which the proxies refuse (96-bit strength; OpenSSL security level 2 needs 112)".into(),
        ),
        (oid::EC, Some(c)) => Err(format!(
            "an ECDSA key on the curve {}; {SERVED}",
            curve_name(c)
        )),
        (oid::EC, None) => Err(format!(
            "an ECDSA key without a named curve; {SERVED}"
        )),
        (oid::DSA, _) => Err(format!("a DSA key; {SERVED}")),
        (oid::ED448, _) => Err(format!("an Ed448 key; {SERVED}")),
        (oid::RSA_PSS, _) => Err(format!("an RSA-PSS key; {SERVED}")),
        (o, _) => Err(format!("a key of type {}; {SERVED}", short_oid(o))),
    }
}

fn curve_name(oid: &str) -> String {
    match oid {
        "1.3.132.0.33" => "secp224r1".into(),
        "1.3.132.0.10" => "secp256k1".into(),
        o if o.starts_with("1.3.36.3.3.2.8.1.1.") => "brainpool".into(),
        o => short_oid(o),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    P521,
    Ed25519,
}

/// The public key of a certificate's SubjectPublicKeyInfo, if served; every certificate
/// of a chain must have one (OpenSSL checks every one's key strength).
fn spki_key(spki: &SubjectPublicKeyInfo<'_>) -> Result<PublicKey, String> {
    let alg = spki.algorithm.algorithm.to_id_string();
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|o| o.to_id_string());
    let bits: &[u8] = &spki.subject_public_key.data;
    let bad = |what: &str| format!("its {what} public key does not decode");
    match key_kind(&alg, curve.as_deref())? {
        KeyKind::Rsa => {
            let Ok(PublicKey_::RSA(k)) = spki.parsed() else {
                return Err(bad("RSA"));
            };
            let n = der_uint(k.modulus).ok_or_else(|| bad("RSA"))?;
            let e = der_uint(k.exponent).ok_or_else(|| bad("RSA"))?;
            rsa_size(&n)?;
            Ok(PublicKey::Rsa { n, e })
        }
        KeyKind::P256 => p256::PublicKey::from_sec1_bytes(bits)
            .map(PublicKey::P256)
            .map_err(|_| bad("P-256")),
        KeyKind::P384 => p384::PublicKey::from_sec1_bytes(bits)
            .map(PublicKey::P384)
            .map_err(|_| bad("P-384")),
        KeyKind::P521 => p521::PublicKey::from_sec1_bytes(bits)
            .map(PublicKey::P521)
            .map_err(|_| bad("P-521")),
        KeyKind::Ed25519 if bits.len() == 32 => Ok(PublicKey::Ed25519(bits.to_vec())),
        KeyKind::Ed25519 => Err(bad("Ed25519")),
    }
}

use x509_parser::public_key::PublicKey as PublicKey_;

/// A positive DER INTEGER's value (minimal encoding, as OpenSSL reads it).
fn der_uint(bytes: &[u8]) -> Option<BigUint> {
    match bytes {
        [] => None,
        [b, ..] if b & 0x80 != 0 => None,
        [0, b, ..] if b & 0x80 == 0 => None,
        _ => Some(BigUint::from_bytes_be(bytes)),
    }
}

fn rsa_size(n: &BigUint) -> Result<(), String> {
    let bits = n.bits();
    if bits < 1968 {
        Err(format!("an RSA key of {bits} bits, which the proxies refuse (OpenSSL security level 2 needs about 2048)"))
    } else if !(RSA_MIN_BITS..=RSA_MAX_BITS).contains(&bits) {
        Err(format!("an RSA key of {bits} bits; {SERVED}"))
    } else {
        Ok(())
    }
}

/// A signature algorithm's family (the key type that makes it) and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigFamily {
    Rsa,
    Ecdsa,
    Ed25519,
    Ed448,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Digest {
    Weak(&'static str),
    Strong,
}

/// What OpenSSL 3.0 makes of a signature algorithm: its family and digest, or None for
/// one it (or k8slb) does not accept.
fn signature(alg: &AlgorithmIdentifier<'_>) -> Option<(SigFamily, Digest)> {
    use Digest::{Strong, Weak};
    use SigFamily::*;
    let o = alg.algorithm.to_id_string();
    Some(match o.as_str() {
        "1.2.840.113549.1.1.2" => (Rsa, Weak("MD2")),
        "1.2.840.113549.1.1.3" => (Rsa, Weak("MD4")),
        "1.2.840.113549.1.1.4" => (Rsa, Weak("MD5")),
        "1.2.840.113549.1.1.5" => (Rsa, Weak("SHA-1")),
        "1.2.840.113549.1.1.14"
        | "1.2.840.113549.1.1.11"
        | "1.2.840.113549.1.1.12"
        | "1.2.840.113549.1.1.13" => (Rsa, Strong),
        oid::RSA_PSS => {
            let Ok(x509_parser::signature_algorithm::SignatureAlgorithm::RSASSA_PSS(p)) =
                x509_parser::signature_algorithm::SignatureAlgorithm::try_from(alg)
            else {
                return None;
            };
            match p.hash_algorithm_oid().to_id_string().as_str() {
                "2.16.840.1.101.3.4.2.4"
                | "2.16.840.1.101.3.4.2.1"
                | "2.16.840.1.101.3.4.2.2"
                | "2.16.840.1.101.3.4.2.3" => (Rsa, Strong),
                "1.3.14.3.2.26" => (Rsa, Weak("SHA-1")),
                "1.2.840.113549.2.5" => (Rsa, Weak("MD5")),
                _ => return None,
            }
        }
        "1.2.840.10045.4.1" => (Ecdsa, Weak("SHA-1")),
        "1.2.840.10045.4.3.1"
        | "1.2.840.10045.4.3.2"
        | "1.2.840.10045.4.3.3"
        | "1.2.840.10045.4.3.4" => (Ecdsa, Strong),
        oid::ED25519 => (Ed25519, Strong),
        oid::ED448 => (Ed448, Strong),
        _ => return None,
    })
}

/// OpenSSL's "self-signed" (`EXFLAG_SS`, x509v3_cache_extensions): the issuer is the
/// subject, the authority key id names this certificate, and the signature is of this
/// certificate's key type. Decided conservatively: names compared as bytes (OpenSSL
/// compares them canonically), an authority key id naming an issuer by name, a duplicate
/// or undecodable key id extension: not self-signed. Not self-signed when OpenSSL would
/// say it is only means its signature is checked.
fn self_signed(c: &X509Certificate<'_>, key: &PublicKey) -> bool {
    if c.subject().as_raw() != c.issuer().as_raw() {
        return false;
    }
    let ext = |o: &str| -> Result<Option<&ParsedExtension<'_>>, ()> {
        let mut found = c
            .extensions()
            .iter()
            .filter(|e| e.oid.to_id_string() == o)
            .map(|e| e.parsed_extension());
        let first = found.next();
        if found.next().is_some() {
            return Err(());
        }
        Ok(first)
    };
    let (Ok(akid), Ok(skid)) = (ext(oid::AKID), ext(oid::SKID)) else {
        return false;
    };
    let skid = match skid {
        None => None,
        Some(ParsedExtension::SubjectKeyIdentifier(k)) => Some(k.0),
        Some(_) => return false,
    };
    match akid {
        None => {}
        Some(ParsedExtension::AuthorityKeyIdentifier(a)) => {
            if a.authority_cert_issuer.is_some() {
                return false;
            }
            if let (Some(k), Some(s)) = (&a.key_identifier, skid) {
                if k.0 != s {
                    return false;
                }
            }
            if let Some(serial) = a.authority_cert_serial {
                if serial != c.raw_serial() {
                    return false;
                }
            }
        }
        Some(_) => return false,
    }
    let family = match key {
        PublicKey::Rsa { .. } => SigFamily::Rsa,
        PublicKey::P256(_) | PublicKey::P384(_) | PublicKey::P521(_) => SigFamily::Ecdsa,
        PublicKey::Ed25519(_) => SigFamily::Ed25519,
    };
    signature(&c.signature_algorithm).is_some_and(|(f, _)| f == family)
}

/// Check one certificate of the chain as OpenSSL loads it (`ssl_security_cert`: its
/// key's strength, and its signature's unless self-signed); its public key.
pub(super) fn certificate(der: &[u8], leaf: bool) -> Result<PublicKey, String> {
    let (rest, c) =
        X509Certificate::from_der(der).map_err(|_| "does not decode as X.509".to_string())?;
    if !rest.is_empty() {
        return Err("has bytes after its X.509 structure".into());
    }
    if c.signature_algorithm != c.tbs_certificate.signature {
        return Err("names two different signature algorithms".into());
    }
    let key = spki_key(c.public_key()).map_err(|e| format!("has {e}"))?;
    if !self_signed(&c, &key) {
        let alg = c.signature_algorithm.algorithm.to_id_string();
        match signature(&c.signature_algorithm) {
            Some((_, Digest::Strong)) => {}
            Some((_, Digest::Weak(d))) => {
                return Err(format!(
                    "is signed with {d}, which the proxies refuse on a {} certificate (OpenSSL security level 2: SHA-224 or stronger)",
                    if leaf { "leaf" } else { "CA" },
                ))
            }
            None => {
                return Err(format!(
                    "is signed with the algorithm {}, which k8slb does not accept (RSA or ECDSA with SHA-224 to SHA-512, RSA-PSS, Ed25519, Ed448)",
                    short_oid(&alg)
                ))
            }
        }
    }
    Ok(key)
}

/// The public key of a private key (PEM `label`, DER), checked: a key type served, a
/// consistent key. Never quotes the key.
pub(super) fn private_key(label: &str, der: &[u8]) -> Result<PublicKey, String> {
    match label {
        "RSA PRIVATE KEY" => rsa_private(der),
        "EC PRIVATE KEY" => {
            use sec1::der::Decode;
            let k = sec1::EcPrivateKey::from_der(der)
                .map_err(|_| "tls.key is not a valid EC private key on a named curve".to_string())?;
            let curve = k
                .parameters
                .map(|sec1::EcParameters::NamedCurve(o)| o.to_string());
            ec_private(key_kind(oid::EC, curve.as_deref())?, der)
        }
        "PRIVATE KEY" => {
            use pkcs8::der::Decode;
            let info = pkcs8::PrivateKeyInfoRef::from_der(der)
                .map_err(|_| "tls.key is not a valid PKCS#8 private key".to_string())?;
            let alg = info.algorithm.oid.to_string();
            let curve = info
                .algorithm
                .parameters
                .and_then(|p| p.decode_as::<pkcs8::ObjectIdentifier>().ok())
                .map(|o| o.to_string());
            match key_kind(&alg, curve.as_deref())? {
                KeyKind::Rsa => rsa_private(info.private_key.as_bytes()),
                KeyKind::Ed25519 => {
                    let k = ring::signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
                        .map_err(|_| "tls.key is not a valid Ed25519 private key".to_string())?;
                    use ring::signature::KeyPair;
                    Ok(PublicKey::Ed25519(k.public_key().as_ref().to_vec()))
                }
                kind => ec_private(kind, info.private_key.as_bytes()),
            }
        }
        "ENCRYPTED PRIVATE KEY" => {
            Err("tls.key is encrypted; the proxies need it unencrypted".into())
        }
        // Never the label itself: a message that says "PRIVATE KEY" reads like a leak.
        _ => Err("tls.key holds a PEM block that is not an unencrypted private key (PKCS#8, PKCS#1 RSA or SEC1 EC)".into()),
    }
}

/// An EC private key of `kind` (SEC1 `ECPrivateKey` DER, alone or inside PKCS#8): the
/// public point derived from its scalar; an embedded public point (in any form) must be
/// that one, and embedded curve parameters `kind`'s.
fn ec_private(kind: KeyKind, sec1_der: &[u8]) -> Result<PublicKey, String> {
    use sec1::der::Decode;
    let k = sec1::EcPrivateKey::from_der(sec1_der)
        .map_err(|_| "tls.key is not a valid EC private key on a named curve".to_string())?;
    if let Some(sec1::EcParameters::NamedCurve(o)) = k.parameters {
        if key_kind(oid::EC, Some(&o.to_string())) != Ok(kind) {
            return Err("tls.key names two different curves".into());
        }
    }
    macro_rules! derive {
        ($curve:ident, $variant:ident, $name:literal) => {{
            let public = $curve::SecretKey::from_slice(k.private_key)
                .map_err(|_| concat!("tls.key is not a valid ", $name, " private key").to_string())?
                .public_key();
            if let Some(embedded) = k.public_key {
                if $curve::PublicKey::from_sec1_bytes(embedded).ok() != Some(public) {
                    return Err(concat!(
                        "tls.key is not a valid ",
                        $name,
                        " private key (its public point is not its own)"
                    )
                    .into());
                }
            }
            Ok(PublicKey::$variant(public))
        }};
    }
    match kind {
        KeyKind::P256 => derive!(p256, P256, "P-256"),
        KeyKind::P384 => derive!(p384, P384, "P-384"),
        KeyKind::P521 => derive!(p521, P521, "P-521"),
        KeyKind::Rsa | KeyKind::Ed25519 => Err("tls.key is not an EC private key".into()),
    }
}

/// A PKCS#1 RSA private key: its public key, if the key is consistent (two primes whose
/// product is n, d the inverse of e modulo p-1 and q-1, the CRT values right) and of a
/// size served.
fn rsa_private(der: &[u8]) -> Result<PublicKey, String> {
    use pkcs1::der::Decode;
    let bad = || "tls.key is not a valid RSA private key".to_string();
    let k = pkcs1::RsaPrivateKeyRef::from_der(der).map_err(|_| bad())?;
    if k.other_prime_infos.is_some() {
        return Err(format!("tls.key is a multi-prime RSA key; {SERVED}"));
    }
    let u = |x: &pkcs1::UintRef<'_>| BigUint::from_bytes_be(x.as_bytes());
    let (n, e, d) = (u(&k.modulus), u(&k.public_exponent), u(&k.private_exponent));
    let (p, q) = (u(&k.prime1), u(&k.prime2));
    let (dp, dq, qinv) = (u(&k.exponent1), u(&k.exponent2), u(&k.coefficient));
    rsa_size(&n).map_err(|e| format!("tls.key is {e}"))?;
    let one = BigUint::from(1u8);
    if p <= one || q <= one || e <= one {
        return Err(bad());
    }
    let (p1, q1) = (&p - &one, &q - &one);
    let de = &d * &e;
    let consistent = &p * &q == n
        && &de % &p1 == one
        && &de % &q1 == one
        && dp == &d % &p1
        && dq == &d % &q1
        && (&qinv * &q) % &p == one;
    if !consistent {
        return Err("tls.key is not a consistent RSA private key".into());
    }
    Ok(PublicKey::Rsa { n, e })
}
