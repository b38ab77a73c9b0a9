//! Where a webhook may be sent (`docs/api.md`, "Webhooks"): https (or http where allowed), and only
//! to public addresses unless private networks are allowed, so that a merchant cannot make the
//! server call into its own network or a cloud metadata service. The address is checked when an
//! endpoint is created and again at every delivery, by the resolver the HTTP client connects
//! through, so a name that later resolves elsewhere (DNS rebinding) is caught.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use reqwest::{
    Url,
    dns::{Addrs, Name, Resolve, Resolving},
};
use url::Host;

use crate::config::WebhookSettings;

/// Whether `ip` is on the public internet: not loopback, private, link-local (which holds the
/// cloud metadata services), shared, multicast, documentation or otherwise reserved space.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        // 100.64.0.0/10, carrier-grade NAT; 192.0.0.0/24, protocol assignments; 198.18.0.0/15,
        // benchmarking; 240.0.0.0/4, reserved.
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (18..20).contains(&b))
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        // fc00::/7 unique local, fe80::/10 link-local, 2001:db8::/32 documentation.
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first == 0x2001 && ip.segments()[1] == 0x0db8))
}

/// Checks an endpoint URL's form, and its address when it names one directly.
pub fn check_url(raw: &str, settings: &WebhookSettings) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("not a valid URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if settings.allow_http => {}
        "http" => return Err("must be https".to_owned()),
        other => return Err(format!("scheme {other} is not http(s)")),
    }
    let ip = match url.host().ok_or("has no host")? {
        Host::Ipv4(ip) => IpAddr::V4(ip),
        Host::Ipv6(ip) => IpAddr::V6(ip),
        // A name is checked when it is resolved, here and by the delivering client.
        Host::Domain(_) => return Ok(url),
    };
    if !settings.allow_private_networks && !is_public(ip) {
        return Err(format!("{ip} is not a public address"));
    }
    Ok(url)
}

/// Resolves the URL's host now and refuses it if any address is not public: the check at
/// creation, so a merchant learns at once.
pub async fn check_resolves(url: &Url, settings: &WebhookSettings) -> Result<(), String> {
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let port = url.port_or_known_default().unwrap_or(443);
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("does not resolve: {e}"))?
        .collect();
    if addresses.is_empty() {
        return Err("does not resolve".to_owned());
    }
    if let Some(private) = addresses
        .iter()
        .find(|a| !settings.allow_private_networks && !is_public(a.ip()))
    {
        return Err(format!(
            "resolves to {}, not a public address",
            private.ip()
        ));
    }
    Ok(())
}

/// The HTTP client's resolver: the system's, keeping public addresses only (unless private
/// networks are allowed), so every connection of every delivery is checked.
pub struct PublicResolver {
    pub allow_private_networks: bool,
}

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private_networks;
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await?
                .filter(|a| allow_private || is_public(a.ip()))
                .collect();
            if found.is_empty() {
                return Err(format!("{} resolves to no public address", name.as_str()).into());
            }
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

impl PublicResolver {
    pub fn shared(settings: &WebhookSettings) -> Arc<Self> {
        Arc::new(Self {
            allow_private_networks: settings.allow_private_networks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
