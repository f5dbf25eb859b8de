#!/bin/sh
# deploy/make-certs.sh - the TLS material of a deployment (deploy/k8s/), made with openssl.
#
#   deploy/make-certs.sh OUTDIR [NAMESPACE]      (NAMESPACE: elasticep, as kustomization.yaml)
#
# Writes into OUTDIR (created; existing files are not overwritten: remove OUTDIR to start over):
#   ca.pem, ca.key                 one CA for the job (keep ca.key offline)
#   etcd-server.pem/.key           etcd's serving and peer certificate (serverAuth + clientAuth),
#                                  SANs etcd, etcd-N.etcd[.NS[.svc[.cluster.local]]] (N < 5),
#                                  localhost, 127.0.0.1
#   etcd-client.pem/.key           the client certificate eepd and the ranks present to etcd
#   eepd-server.pem/.key           eepd's gRPC serving certificate, SANs eepd[.NS[.svc...]], localhost
#   eepctl.pem/.key                an operator's client certificate for eepd's mutating calls
#   secrets.yaml                   the three Secrets the manifests mount (kubectl apply -f it):
#                                  eep-etcd-server, eep-etcd-client, eep-eepd-tls (each tls.crt,
#                                  tls.key, ca.crt)
# Certificates are EC P-256, valid 825 days.  Exit 0 done, 1 openssl failed, 2 usage.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 OUTDIR [NAMESPACE]" >&2
    exit 2
fi
out=$1
ns=${2:-elasticep}
days=825
command -v openssl >/dev/null || { echo "$0: openssl is not installed" >&2; exit 1; }
mkdir -p "$out"
cd "$out"
umask 077

key() { [ -f "$1.key" ] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }

if [ ! -f ca.pem ]; then
    key ca
    openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=elasticep-ca-$ns" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out ca.pem
fi

# cert NAME CN EXTENDED_KEY_USAGE [SAN]
cert() {
    [ -f "$1.pem" ] && return 0
    key "$1"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        if [ -n "${4:-}" ]; then echo "subjectAltName=$4"; fi
    } > "$1.ext"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 \
        -days "$days" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

svc_sans() { # svc_sans NAME: NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local
    echo "DNS:$1,DNS:$1.$ns,DNS:$1.$ns.svc,DNS:$1.$ns.svc.cluster.local"
}
etcd_sans="$(svc_sans etcd)"
for i in 0 1 2 3 4; do
    etcd_sans="$etcd_sans,$(svc_sans "etcd-$i.etcd")"
done
cert etcd-server etcd "serverAuth,clientAuth" "$etcd_sans,DNS:localhost,IP:127.0.0.1"
cert etcd-client eep-etcd-client clientAuth
cert eepd-server eepd serverAuth "$(svc_sans eepd),DNS:localhost,IP:127.0.0.1"
cert eepctl eepctl clientAuth

b64() { base64 < "$1" | tr -d '\n'; }
secret() { # secret NAME CERT_BASENAME
    printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\n' "$1" "$ns"
    printf 'type: kubernetes.io/tls\ndata:\n'
    printf '  tls.crt: %s\n  tls.key: %s\n  ca.crt: %s\n' "$(b64 "$2.pem")" "$(b64 "$2.key")" \
        "$(b64 ca.pem)"
}
{
    echo "# Made by deploy/make-certs.sh: kubectl apply -f secrets.yaml (holds private keys)."
    secret eep-etcd-server etcd-server
    secret eep-etcd-client etcd-client
    secret eep-eepd-tls eepd-server
} > secrets.yaml
echo "$out: ca.pem, etcd-server, etcd-client, eepd-server, eepctl (.pem/.key), secrets.yaml"
