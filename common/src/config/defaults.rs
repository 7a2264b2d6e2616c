//! The shipped defaults of the proxy and keepalived sections.

use super::*;

/// HAProxy sections used when the config has no `haproxy` key. Unlike k8slb's sample
/// (`timeout connect 30ms`, `daemon`, `chroot`), these suit an actor that supervises
/// HAProxy in the foreground.
pub fn default_haproxy() -> HaproxySections {
    let lines = |v: &[&str]| v.iter().map(|s| s.parse().expect("valid")).collect();
    HaproxySections {
        global: lines(&[
            "maxconn 20000",
            "ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets",
            "ssl-default-server-options ssl-min-ver TLSv1.2 no-tls-tickets",
            "tune.ssl.default-dh-param 2048",
        ]),
        defaults: lines(&[
            "log global",
            "retries 3",
            "option redispatch",
            "balance leastconn",
            "timeout connect 5s",
            "timeout check 1s",
            "timeout client 30s",
            "timeout server 30s",
            "timeout tunnel 1h",
        ]),
        tcpfront: vec![],
        // X-Forwarded-For/-Proto/-Port are written by the template in every http
        // frontend (k8slb's default httpfront lines would only repeat them).
        httpfront: vec![],
        tcpback: vec![],
        httpback: vec![],
    }
}

/// nginx sections used when the config has no `nginx` key.
pub fn default_nginx() -> NginxSections {
    let lines = |v: &[&str]| v.iter().map(|s| s.parse().expect("valid")).collect();
    NginxSections {
        global: lines(&["worker_processes auto;"]),
        http: lines(&[
            "sendfile on;",
            "keepalive_timeout 65;",
            "ssl_protocols TLSv1.2 TLSv1.3;",
        ]),
        proxy: lines(&[
            // The client's Host as sent, port included (nginx's $host drops it); the
            // actor defines $k8slb_host in every nginx.conf (render_http::nx_http_base).
            "proxy_set_header Host $k8slb_host;",
            "proxy_set_header X-Real-IP $remote_addr;",
            "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
            "proxy_set_header X-Forwarded-Proto $scheme;",
            "proxy_http_version 1.1;",
            "proxy_connect_timeout 5s;",
            "proxy_next_upstream error timeout;",
        ]),
        upstream: vec![],
        stream: vec![],
    }
}

pub fn default_keepalived() -> KeepalivedSettings {
    KeepalivedSettings {
        advert_int_ms: DEFAULT_ADVERT_INT_MS,
        unicast: false,
        preempt: false,
        email: None,
        email_from: None,
        email_server: None,
        email_server_timeout_s: 30,
        garp_repeat: 5,
        garp_master_delay_s: 1,
    }
}
