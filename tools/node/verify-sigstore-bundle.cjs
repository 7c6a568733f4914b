#!/usr/bin/env node
// Verify one Sigstore bundle offline against a pinned trusted root with sigstore-js
// (@sigstore/verify, the verifier behind npm's `sigstore` package): a second, independent
// verifier beside sigstore-python, so that the suite's Sigstore stand-in cannot drift into a
// shape only one implementation accepts.
//
// usage: node verify-sigstore-bundle.cjs --bundle FILE --trust-root FILE
//            [--artifact FILE] [--identity SAN] [--issuer URL] [--tlog-threshold N] [--ctlog-threshold N]
//
// --trust-root takes a ClientTrustConfig (application/vnd.dev.sigstore.clienttrustconfig.v0.1+json,
// its `trustedRoot` is used) or a bare trusted root. --artifact is the signed file of a
// message-signature bundle (a DSSE bundle carries its payload). --identity / --issuer pin the
// signer (the certificate's SAN and the OIDC issuer extension), exactly. The thresholds (default 1
// each, sigstore-js's) say how many transparency-log entries and SCTs must verify: 0 and 0 for a
// bundle of an instance without logs (GitHub's release attestations: an RFC 3161 timestamp only).
//
// Prints one JSON line and exits 0 when the bundle verifies ({"ok": true, "identity": SAN, "issuer": URL}), 1 when it does
// not ({"ok": false, "code": ..., "message": ...}), 2 for bad usage or an unreadable file.
// Nothing is fetched: the trusted root is the one given (no TUF).
'use strict';

const fs = require('node:fs');
const { bundleFromJSON } = require('@sigstore/bundle');
const { TrustedRoot } = require('@sigstore/protobuf-specs');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

const MAX_INPUT_BYTES = 64 * 1024 * 1024; // bounded reads: bundles and roots are kilobytes
const CLIENT_TRUST_CONFIG = 'application/vnd.dev.sigstore.clienttrustconfig.v0.1+json';
const OPTIONS = new Set(['--bundle', '--trust-root', '--artifact', '--identity', '--issuer', '--tlog-threshold', '--ctlog-threshold']);

function usage(message) {
  process.stdout.write(JSON.stringify({ ok: false, code: 'USAGE', message }) + '\n');
  process.exit(2);
}

function parseArguments(argv) {
  const options = {};
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i];
    if (!OPTIONS.has(name)) usage(`unknown argument ${JSON.stringify(name)}; expected one of ${[...OPTIONS].join(', ')}`);
    if (i + 1 >= argv.length) usage(`${name} needs a value`);
    if (name in options) usage(`${name} given twice`);
    options[name] = argv[i + 1];
  }
  if (!options['--bundle'] || !options['--trust-root']) usage('--bundle and --trust-root are required');
  return options;
}

function readBounded(path) {
  let size;
  try {
    size = fs.statSync(path).size;
  } catch (error) {
    usage(`${path}: cannot read (${error.code})`);
  }
  if (size > MAX_INPUT_BYTES) usage(`${path}: ${size} bytes, more than the ${MAX_INPUT_BYTES} this tool reads`);
  return fs.readFileSync(path);
}

function readJSON(path) {
  try {
    return JSON.parse(readBounded(path).toString('utf-8'));
  } catch (error) {
    usage(`${path}: not JSON (${error.message})`);
  }
}

function trustedRootOf(document) {
  const root = document.mediaType === CLIENT_TRUST_CONFIG ? document.trustedRoot : document;
  return TrustedRoot.fromJSON(root);
}

function threshold(options, name) {
  const value = options[name];
  if (value === undefined) return undefined;
  if (!/^[0-9]$/.test(value)) usage(`${name} must be a digit, not ${JSON.stringify(value)}`);
  return Number(value);
}

function main() {
  const options = parseArguments(process.argv.slice(2));
  const trustMaterial = toTrustMaterial(trustedRootOf(readJSON(options['--trust-root'])));
  const artifact = options['--artifact'] ? readBounded(options['--artifact']) : undefined;
  const policy = {};
  if (options['--identity']) policy.subjectAlternativeName = options['--identity'];
  if (options['--issuer']) policy.extensions = { issuer: options['--issuer'] };
  try {
    const entity = toSignedEntity(bundleFromJSON(readJSON(options['--bundle'])), artifact);
    const verifierOptions = { tlogThreshold: threshold(options, '--tlog-threshold'), ctlogThreshold: threshold(options, '--ctlog-threshold') };
    const signer = new Verifier(trustMaterial, verifierOptions).verify(entity, policy);
    const identity = signer.identity || {};
    const issuer = (identity.extensions || {}).issuer ?? null;
    process.stdout.write(JSON.stringify({ ok: true, identity: identity.subjectAlternativeName ?? null, issuer }) + '\n');
    process.exit(0);
  } catch (error) {
    const code = error && error.code ? String(error.code) : (error && error.name) || 'ERROR';
    process.stdout.write(JSON.stringify({ ok: false, code, message: String(error && error.message) }) + '\n');
    process.exit(1);
  }
}

main();
