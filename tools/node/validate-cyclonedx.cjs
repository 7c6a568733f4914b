#!/usr/bin/env node
// Validates CycloneDX JSON documents with @cyclonedx/cyclonedx-library (the OWASP JavaScript
// implementation, its strict JSON schema through ajv): a second implementation beside the
// Python library the pipeline writes with.  Usage: node validate-cyclonedx.cjs FILE...
// Prints one JSON line per file: {"file", "specVersion", "valid", "errors"}; exit 0 when every
// file is valid, 1 when one is not, 2 when it cannot check (bad usage, missing package).
'use strict'
const fs = require('node:fs')

let CDX
try {
  CDX = require('@cyclonedx/cyclonedx-library')
} catch (err) {
  process.stderr.write(`error: @cyclonedx/cyclonedx-library is not installed (${err.code || err.message}); run: npm ci --prefix tools/node\n`)
  process.exit(2)
}

const VERSIONS = {
  '1.4': CDX.Spec.Version.v1dot4,
  '1.5': CDX.Spec.Version.v1dot5,
  '1.6': CDX.Spec.Version.v1dot6
}
const MAX_BYTES = 64 * 1024 * 1024

async function check (file) {
  const size = fs.statSync(file).size
  if (size > MAX_BYTES) throw new Error(`${file}: ${size} bytes is larger than ${MAX_BYTES}`)
  const text = fs.readFileSync(file, 'utf8')
  const specVersion = JSON.parse(text).specVersion
  const version = VERSIONS[specVersion]
  if (version === undefined) {
    return { file, specVersion: specVersion ?? null, valid: false, errors: [`unsupported specVersion ${JSON.stringify(specVersion)}`] }
  }
  const errors = await new CDX.Validation.JsonStrictValidator(version).validate(text)
  return {
    file,
    specVersion,
    valid: errors === null,
    errors: errors === null ? [] : errors.map(e => `${e.instancePath || '/'}: ${e.message}`)
  }
}

async function main (files) {
  if (files.length === 0) {
    process.stderr.write('usage: node validate-cyclonedx.cjs FILE...\n')
    return 2
  }
  let status = 0
  for (const file of files) {
    let result
    try {
      result = await check(file)
    } catch (err) {
      if (err instanceof CDX.Validation.MissingOptionalDependencyError) {
        process.stderr.write(`error: ${err.message}; run: npm ci --prefix tools/node\n`)
        return 2
      }
      result = { file, specVersion: null, valid: false, errors: [String(err.message || err)] }
    }
    process.stdout.write(JSON.stringify(result) + '\n')
    if (!result.valid) status = 1
  }
  return status
}

main(process.argv.slice(2)).then(code => process.exit(code), err => {
  process.stderr.write(`error: ${err.stack || err}\n`)
  process.exit(2)
})
