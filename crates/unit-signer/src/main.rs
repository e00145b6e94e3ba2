//! `unit-signer`: the cloud side of vouched unit sharing. Watches what unit leaders watch
//! and writes, every `--period`, a batch of the states each stream went through, signed
//! with `--signing-key-file` (Ed25519, PKCS#8, PEM or DER), to ConfigMap
//! `edgegrid-unit-digests` in `--namespace`. With `--leader-elect`, one replica signs
//! (Lease `<namespace>/unit-signer`); SIGTERM stops it and exits 0.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use clap::Parser;
use controller_support::{LeaderFlags, Runtime, RuntimeFlags, parse_duration};
use ring::signature::{Ed25519KeyPair, KeyPair};
use unit_signer::{SignerConfig, SignerMetrics};

#[derive(Parser, Debug)]
#[command(version, about = "Signs the states of the objects unit leaders share, for their followers to check")]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<8081, 8080>,
    #[command(flatten)]
    leader: LeaderFlags,
    /// The Ed25519 signing key (PKCS#8, PEM `PRIVATE KEY` or DER), e.g. from
    /// `openssl genpkey -algorithm ed25519`.
    #[arg(long)]
    signing_key_file: PathBuf,
    /// Print the signing key's public key (base64, what followers are given) and exit.
    #[arg(long)]
    print_public_key: bool,
    /// The namespace of the batch ConfigMap (the wrappers').
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    namespace: String,
    /// The node label whose value names a unit (the wrappers' `--unit-label-key`).
    #[arg(long, default_value = "")]
    unit_label_key: String,
    /// How often a batch is written.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    period: Duration,
}

/// The key in `path`: PKCS#8, PEM or DER (v1 as OpenSSL writes it, or v2).
fn read_key(path: &std::path::Path) -> anyhow::Result<Ed25519KeyPair> {
    let bytes = std::fs::read(path).with_context(|| format!("reading --signing-key-file {}", path.display()))?;
    let der = match std::str::from_utf8(&bytes).ok().filter(|text| text.trim_start().starts_with("-----BEGIN")) {
        Some(pem) => {
            let body: String = pem.lines().filter(|line| !line.starts_with("-----")).collect();
            base64::engine::general_purpose::STANDARD
                .decode(body.trim())
                .with_context(|| format!("--signing-key-file {}: the PEM body is not base64", path.display()))?
        }
        None => bytes,
    };
    Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
        .map_err(|e| anyhow::anyhow!("--signing-key-file {}: not an Ed25519 PKCS#8 key ({e})", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let key = read_key(&flags.signing_key_file)?;
    if flags.print_public_key {
        println!("{}", base64::engine::general_purpose::STANDARD.encode(key.public_key().as_ref()));
        return Ok(());
    }
    anyhow::ensure!(!flags.unit_label_key.is_empty(), "--unit-label-key is required: the label naming a unit");
    let metrics = SignerMetrics::default();
    let runtime = Runtime::builder("unit-signer", &flags.runtime)
        .metrics(&metrics)
        .leader_election(&flags.leader)
        .build()
        .await?;
    runtime.mark_ready();
    let client = runtime.client();
    let key = Arc::new(key);
    let config =
        SignerConfig { namespace: flags.namespace, unit_label_key: flags.unit_label_key, period: flags.period };
    runtime
        .run_while_leading(move |shutdown| unit_signer::run(client, key, config, metrics, shutdown.signalled()))
        .await?;
    Ok(())
}
