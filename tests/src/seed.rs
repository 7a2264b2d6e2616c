//! The seed README's Service examples, as written, with only the addresses moved into the
//! lab's ranges (1.2.3.0/22 → 198.18.1.0/24 and 198.18.2.0/24, 2001:468::/64 →
//! fd00:18::/64): the lab never uses addresses outside 198.18.0.0/15 and fd00::/8.

pub const MYAPP_HTTP: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: myapp-loadbalancer
  namespace: default
spec:
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 80
  selector:
    app: myapp
  type: LoadBalancer
";

pub const MYAPP_HTTPS: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: myapp-loadbalancer
  namespace: default
spec:
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: 80
  selector:
    app: myapp
  type: LoadBalancer
";

pub const RANCHER: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: rancher-loadbalancer
  namespace: cattle-system
  annotations:
    loadbalancer/pool: external
spec:
  loadBalancerIP: 198.18.1.4
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: 443
  selector:
    app: rancher
  type: LoadBalancer
";

pub const DUAL: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: myapp-loadbalancer
  namespace: default
  annotations:
    loadbalancer/pool: external
spec:
  loadBalancerIP: 198.18.1.4
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 80
  selector:
    app: myapp
  type: LoadBalancer
---
apiVersion: v1
kind: Service
metadata:
  name: myapp-loadbalancer6
  namespace: default
  annotations:
    loadbalancer/pool: ipv6
spec:
  loadBalancerIP: fd00:18::201:4
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 80
  selector:
    app: myapp
  type: LoadBalancer
";

pub const INGRESS: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: ingress-lb
  namespace: ingress-nginx
  annotations:
    loadbalancer/pool: public
spec:
  loadBalancerIP: 198.18.2.4
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 80
  - name: https
    port: 443
    protocol: TCP
    targetPort: 80
  selector:
    app: ingress-nginx
  type: LoadBalancer
";
