<#
.SYNOPSIS
Starts, stops, restarts and reports the active native NInfer lane release.

.DESCRIPTION
The server (bin\ninfer-serve.exe of the active release) runs as a scheduled
task under a service account.  The task runs this script with the internal
action Serve, which binds the server to the lane's GPU by UUID
(CUDA_VISIBLE_DEVICES), launches bin\ninfer-serve.exe with the flags translated
from the packaged server-config.json, records the launch in
state\runtime.json and waits for the server to exit.

  Start    Verifies the active release against its install record and its inner
           SHA256SUMS.txt, the host memory floor, the bearer key file (refused when
           shorter than the configuration's minimum_key_bytes, at least 32; the key
           is never printed), the pinned model file (size, and SHA-256 unless a
           verification record for the same file is current), that the listen port
           is free; takes the GPU with Control-GpuOwner.ps1 -Action Acquire;
           registers and runs the task; waits until /health answers and the
           authenticated status reports the expected binary and configuration
           SHA-256.  On any failure it stops what it started and gives the GPU back.
  Stop     Signals the launch's named kernel event (Global\NInfer-<release-id>-stop)
           and waits up to the release's graceful_stop_timeout_seconds (900) for the
           server to flush and exit; only then terminates it.  Gives the GPU back
           (restores the owner's power limit) and writes state\last-stop.json.
  Restart  Stop, then Start.
  Status   Prints one JSON object: pointers, install record, task, process,
           endpoint, GPU lease and the last stop.
  Serve    Internal: what the scheduled task runs.  Do not call it directly.

The translation (same order as pipeline.serverconfig.server_arguments):
  <model> --host --port --api-key-file --model-id --deployment-profile
  --binary-sha256 --artifact-sha256 --config-sha256 --max-context --kv-capacity
  --kv-dtype --prefill-chunk --spec mtp --draft-tokens [--lm-head-draft]
  --max-concurrency --pending-timeout-ms --device-state-slots --host-budget-bytes
  --admission-headroom-mib --gpu-keep-warm-ms --session-checkpoint-dir
  --session-checkpoint-require-origin-auth --request-log-jsonl --stop-event

The service account cannot change power limits, so a server that exits on its
own leaves the GPU lease (and the lane's lower serving power limit) in place
until Stop runs; Status reports that as owner_restoration_pending.

.PARAMETER Action
Start, Stop, Status, Restart (or the internal Serve).

.PARAMETER StateRoot
The lane's protected state root.

.PARAMETER GpuUuid
The GPU to serve on (nvidia-smi UUID).  Needed on the first Start; later starts
reuse the UUID recorded in state\gpu-uuid.

.PARAMETER ServiceAccount
The account the scheduled task runs as (must match Protect-StateRoot.ps1).

.PARAMETER ReadyTimeoutSeconds
How long Start waits for the model to load and the endpoint to answer.

.OUTPUTS
One JSON object (ninfer_windows_lifecycle_status or ninfer_windows_managed_stop_receipt).

.EXAMPLE
.\Control-Release.ps1 -Action Start -StateRoot C:\ProgramData\NInfer\qwen38-4090-native -GpuUuid GPU-01234567-89ab-cdef-0123-456789abcdef

.EXAMPLE
.\Control-Release.ps1 -Action Stop -StateRoot C:\ProgramData\NInfer\qwen38-4090-native
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)]
    [ValidateSet('Start', 'Stop', 'Status', 'Restart', 'Serve')]
    [string]$Action,

    [Parameter(Mandatory = $true)]
    [ValidateNotNullOrEmpty()]
    [string]$StateRoot,

    [ValidatePattern('^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')]
    [string]$GpuUuid,

    [ValidateNotNullOrEmpty()]
    [string]$ServiceAccount = 'NT AUTHORITY\LOCAL SERVICE',

    [ValidateRange(30, 7200)]
    [int]$ReadyTimeoutSeconds = 900
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

$Invariant = [System.Globalization.CultureInfo]::InvariantCulture
$Utf8Strict = New-Object System.Text.UTF8Encoding($false, $true)
$Utf8NoBom = New-Object System.Text.UTF8Encoding($false)
$ReleaseIdPattern = '^[a-z0-9][a-z0-9.-]{0,127}$'
$Sha256Pattern = '^[0-9a-f]{64}$'
$StopEventPattern = '^Global\\NInfer-[a-z0-9][a-z0-9.-]{0,127}-stop$'
$InnerChecksums = 'SHA256SUMS.txt'
$TaskPath = '\NInfer\'

function Resolve-StateRoot {
    param([Parameter(Mandatory = $true)][string]$Path)
    $full = [System.IO.Path]::GetFullPath($ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Path))
    if ($full -notmatch '^[A-Za-z]:\\') {
        throw "state root must be an absolute local drive path (found '$Path')"
    }
    $full = $full.TrimEnd('\')
    $cursor = $full
    while (-not [string]::IsNullOrEmpty($cursor)) {
        if (Test-Path -LiteralPath $cursor) {
            if (([System.IO.File]::GetAttributes($cursor) -band [System.IO.FileAttributes]::ReparsePoint) -ne 0) {
                throw "refusing state root '$full': '$cursor' is a junction, symbolic link or other reparse point"
            }
        }
        $parent = [System.IO.Path]::GetDirectoryName($cursor)
        if ([string]::IsNullOrEmpty($parent) -or $parent -eq $cursor) { break }
        $cursor = $parent
    }
    if (-not (Test-Path -LiteralPath $full -PathType Container)) {
        throw "state root '$full' does not exist; run Protect-StateRoot.ps1 and Install-Release.ps1 first"
    }
    return $full
}

function Get-InnermostException {
    param([Parameter(Mandatory = $true)][System.Management.Automation.ErrorRecord]$ErrorRecord)
    # .NET exceptions reach PowerShell wrapped in MethodInvocationException.
    $exception = $ErrorRecord.Exception
    while ($null -ne $exception.InnerException) {
        $exception = $exception.InnerException
    }
    return $exception
}

function Get-Sha256 {
    param([Parameter(Mandatory = $true)][string]$Path)
    return (Get-FileHash -LiteralPath $Path -Algorithm SHA256).Hash.ToLowerInvariant()
}

function Get-Field {
    param(
        [Parameter(Mandatory = $true)][AllowNull()][object]$Object,
        [Parameter(Mandatory = $true)][string]$Name,
        [Parameter(Mandatory = $true)][string]$Where
    )
    if ($null -eq $Object) {
        throw "$Where is missing"
    }
    $property = $Object.PSObject.Properties[$Name]
    if ($null -eq $property) {
        throw "$Where has no field '$Name'"
    }
    return $property.Value
}

function Read-JsonDocument {
    param([Parameter(Mandatory = $true)][string]$Path)
    if (-not (Test-Path -LiteralPath $Path -PathType Leaf)) {
        throw "required file '$Path' does not exist"
    }
    return (ConvertFrom-Json -InputObject ([System.IO.File]::ReadAllText($Path, $Utf8Strict)))
}

function Write-TextAtomic {
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][AllowEmptyString()][string]$Text
    )
    $directory = [System.IO.Path]::GetDirectoryName($Path)
    $temporary = Join-Path $directory ('.' + [System.IO.Path]::GetFileName($Path) + '.' + [guid]::NewGuid().ToString('N') + '.tmp')
    $bytes = $Utf8NoBom.GetBytes($Text.Replace("`r`n", "`n"))
    $stream = New-Object System.IO.FileStream($temporary, [System.IO.FileMode]::CreateNew, [System.IO.FileAccess]::Write, [System.IO.FileShare]::None)
    try {
        $stream.Write($bytes, 0, $bytes.Length)
        $stream.Flush($true)
    }
    finally {
        $stream.Dispose()
    }
    if (Test-Path -LiteralPath $Path -PathType Leaf) {
        [System.IO.File]::Replace($temporary, $Path, [System.Management.Automation.Language.NullString]::Value)
    }
    else {
        [System.IO.File]::Move($temporary, $Path)
    }
}

function Read-StatePointer {
    param([Parameter(Mandatory = $true)][string]$Name)
    $path = Join-Path $script:StateDirectory $Name
    if (-not (Test-Path -LiteralPath $path -PathType Leaf)) {
        return $null
    }
    $text = [System.IO.File]::ReadAllText($path, $Utf8Strict)
    if (-not $text.EndsWith("`n") -or $text.Substring(0, $text.Length - 1) -cnotmatch $ReleaseIdPattern) {
        throw "state pointer '$path' is damaged; run Install-Release.ps1 -RepairInterruptedInstall"
    }
    return $text.Substring(0, $text.Length - 1)
}

function ConvertTo-CommandLineArgument {
    param([Parameter(Mandatory = $true)][AllowEmptyString()][string]$Value)
    # Quoting for CommandLineToArgvW / the MSVC runtime: backslashes are literal
    # except before a quote; a quote is escaped with a backslash.
    if ($Value.Length -gt 0 -and $Value -notmatch '[\s"]') {
        return $Value
    }
    $builder = New-Object System.Text.StringBuilder
    [void]$builder.Append('"')
    $slashes = 0
    foreach ($character in $Value.ToCharArray()) {
        if ($character -eq '\') {
            $slashes++
            continue
        }
        if ($character -eq '"') {
            [void]$builder.Append([char]92, 2 * $slashes + 1)
            [void]$builder.Append('"')
        }
        else {
            if ($slashes -gt 0) {
                [void]$builder.Append([char]92, $slashes)
            }
            [void]$builder.Append($character)
        }
        $slashes = 0
    }
    if ($slashes -gt 0) {
        [void]$builder.Append([char]92, 2 * $slashes)
    }
    [void]$builder.Append('"')
    return $builder.ToString()
}

function Resolve-RelativeTemplate {
    param(
        [Parameter(Mandatory = $true)][string]$Template,
        [Parameter(Mandatory = $true)][string]$InstanceId,
        [Parameter(Mandatory = $true)][string]$Field
    )
    if ($Template -cnotmatch '^[A-Za-z0-9._{}/-]+$' -or $Template.StartsWith('/') -or $Template -match '(^|/)\.\.?(/|$)') {
        throw "server-config.json $Field '$Template' is not a plain relative path"
    }
    $relative = $Template.Replace('{release_instance_id}', $InstanceId)
    if ($relative.Contains('{') -or $relative.Contains('}')) {
        throw "server-config.json $Field '$Template' uses a placeholder other than {release_instance_id}"
    }
    return (Join-Path $script:Root ($relative.Replace('/', '\')))
}

function Get-ServerArgumentList {
    param(
        [Parameter(Mandatory = $true)][object]$Config,
        [Parameter(Mandatory = $true)][string]$ModelPath,
        [Parameter(Mandatory = $true)][string]$ApiKeyFile,
        [Parameter(Mandatory = $true)][string]$BinaryHash,
        [Parameter(Mandatory = $true)][string]$ArtifactHash,
        [Parameter(Mandatory = $true)][string]$ConfigHash,
        [Parameter(Mandatory = $true)][string]$ReleaseInstanceId
    )
    foreach ($hash in @($BinaryHash, $ArtifactHash, $ConfigHash)) {
        if ($hash -cnotmatch $Sha256Pattern) {
            throw "identity hash '$hash' is not 64 lowercase hex digits"
        }
    }
    if ($ReleaseInstanceId -cnotmatch '^[a-z0-9][a-z0-9.-]{0,140}$') {
        throw "release instance id '$ReleaseInstanceId' is not valid"
    }
    $listen = Get-Field $Config 'listen' 'server-config.json'
    $auth = Get-Field $Config 'auth' 'server-config.json'
    $engine = Get-Field $Config 'engine' 'server-config.json'
    $cache = Get-Field $Config 'context_cache' 'server-config.json'
    $speculative = Get-Field $Config 'speculative' 'server-config.json'
    $checkpoint = Get-Field $Config 'session_checkpoint' 'server-config.json'
    $telemetry = Get-Field $Config 'telemetry' 'server-config.json'
    $vision = Get-Field $Config 'vision' 'server-config.json'
    $model = Get-Field $Config 'model' 'server-config.json'
    $listenHost = [string](Get-Field $listen 'host' 'listen')
    if ($listenHost -cne '127.0.0.1' -and $listenHost -cne '::1') {
        throw "server-config.json listen.host '$listenHost' is not a loopback address"
    }
    if ((Get-Field $auth 'required' 'auth') -ne $true -or (Get-Field $auth 'scheme' 'auth') -cne 'bearer' -or [int](Get-Field $auth 'minimum_key_bytes' 'auth') -lt 32) {
        throw 'server-config.json must require bearer authentication with keys of at least 32 bytes'
    }
    if ((Get-Field $checkpoint 'required' 'session_checkpoint') -ne $true -or (Get-Field $checkpoint 'require_origin_auth' 'session_checkpoint') -ne $true) {
        throw 'server-config.json must require session checkpoints with origin authentication'
    }
    if ((Get-Field $speculative 'backend' 'speculative') -cne 'mtp' -or (Get-Field $speculative 'dflash2' 'speculative') -ne $false) {
        throw 'server-config.json speculative must be MTP without DFlash2 on the native lanes'
    }
    if ((Get-Field $vision 'enabled' 'vision') -ne $false) {
        throw 'server-config.json vision.enabled must be false on the native lanes'
    }
    if ([string](Get-Field $model 'artifact_sha256' 'model') -cne $ArtifactHash) {
        throw 'the artifact SHA-256 to announce differs from server-config.json model.artifact_sha256'
    }
    $releaseId = [string](Get-Field $Config 'deployment_profile' 'server-config.json')
    $stopEvent = 'Global\NInfer-' + $releaseId + '-stop'
    if ($stopEvent -cnotmatch $StopEventPattern) {
        throw "stop event name '$stopEvent' is not valid"
    }
    $text = { param($value) ([System.Convert]::ToString($value, $Invariant)) }

    $arguments = New-Object System.Collections.Generic.List[string]
    $arguments.Add($ModelPath)
    $arguments.Add('--host'); $arguments.Add($listenHost)
    $arguments.Add('--port'); $arguments.Add((& $text (Get-Field $listen 'port' 'listen')))
    $arguments.Add('--api-key-file'); $arguments.Add($ApiKeyFile)
    $arguments.Add('--model-id'); $arguments.Add([string](Get-Field $model 'public_id' 'model'))
    $arguments.Add('--deployment-profile'); $arguments.Add($releaseId)
    $arguments.Add('--binary-sha256'); $arguments.Add($BinaryHash)
    $arguments.Add('--artifact-sha256'); $arguments.Add($ArtifactHash)
    $arguments.Add('--config-sha256'); $arguments.Add($ConfigHash)
    $arguments.Add('--max-context'); $arguments.Add((& $text (Get-Field $cache 'max_context_tokens' 'context_cache')))
    $arguments.Add('--kv-capacity'); $arguments.Add((& $text (Get-Field $cache 'kv_capacity_tokens' 'context_cache')))
    $arguments.Add('--kv-dtype'); $arguments.Add([string](Get-Field $cache 'kv_dtype' 'context_cache'))
    $arguments.Add('--prefill-chunk'); $arguments.Add((& $text (Get-Field $engine 'prefill_chunk_tokens' 'engine')))
    $arguments.Add('--spec'); $arguments.Add('mtp')
    $arguments.Add('--draft-tokens'); $arguments.Add((& $text (Get-Field $speculative 'draft_tokens' 'speculative')))
    if ((Get-Field $speculative 'lm_head_draft' 'speculative') -eq $true) {
        $arguments.Add('--lm-head-draft')
    }
    $arguments.Add('--max-concurrency'); $arguments.Add((& $text (Get-Field $engine 'max_concurrency' 'engine')))
    $arguments.Add('--pending-timeout-ms'); $arguments.Add((& $text (Get-Field $engine 'pending_timeout_ms' 'engine')))
    $arguments.Add('--device-state-slots'); $arguments.Add((& $text (Get-Field $cache 'extra_device_state_slots' 'context_cache')))
    $arguments.Add('--host-budget-bytes'); $arguments.Add((& $text (Get-Field $cache 'shared_host_budget_bytes' 'context_cache')))
    $arguments.Add('--admission-headroom-mib'); $arguments.Add((& $text (Get-Field $engine 'admission_headroom_mib' 'engine')))
    $arguments.Add('--gpu-keep-warm-ms'); $arguments.Add((& $text (Get-Field $engine 'gpu_keep_warm_ms' 'engine')))
    $arguments.Add('--session-checkpoint-dir'); $arguments.Add((Resolve-RelativeTemplate -Template ([string](Get-Field $checkpoint 'directory' 'session_checkpoint')) -InstanceId $ReleaseInstanceId -Field 'session_checkpoint.directory'))
    $arguments.Add('--session-checkpoint-require-origin-auth')
    $arguments.Add('--request-log-jsonl'); $arguments.Add((Resolve-RelativeTemplate -Template ([string](Get-Field $telemetry 'request_log_jsonl' 'telemetry')) -InstanceId $ReleaseInstanceId -Field 'telemetry.request_log_jsonl'))
    $arguments.Add('--stop-event'); $arguments.Add($stopEvent)
    return $arguments.ToArray()
}

function Get-ActiveRelease {
    if ($null -ne (Read-StatePointer -Name 'prepared_release')) {
        throw 'an interrupted install left state\prepared_release; run Install-Release.ps1 -RepairInterruptedInstall first'
    }
    $releaseId = Read-StatePointer -Name 'active_release'
    if ($null -eq $releaseId) {
        throw "no active release in '$($script:Root)'; install one with Install-Release.ps1"
    }
    $root = Join-Path (Join-Path $script:Root 'releases') $releaseId
    $record = Read-JsonDocument -Path (Join-Path (Join-Path $script:StateDirectory 'installed') ($releaseId + '.json'))
    if ([string](Get-Field $record 'release_id' 'install record') -cne $releaseId) {
        throw "install record of '$releaseId' names another release"
    }
    $configPath = Join-Path $root 'server-config.json'
    $config = Read-JsonDocument -Path $configPath
    $spec = Read-JsonDocument -Path (Join-Path $root 'release-spec.json')
    if ([string](Get-Field $config 'deployment_profile' 'server-config.json') -cne $releaseId) {
        throw "active release '$releaseId' carries a server-config.json for '$($config.deployment_profile)'"
    }
    return [pscustomobject]@{
        id = $releaseId
        root = $root
        record = $record
        instance_id = [string](Get-Field $record 'release_instance_id' 'install record')
        config = $config
        config_path = $configPath
        spec = $spec
        server = Join-Path $root 'bin\ninfer-serve.exe'
    }
}

function Assert-ReleaseBytes {
    param([Parameter(Mandatory = $true)][object]$Release, [switch]$Full)
    $record = $Release.record
    $sumsPath = Join-Path $Release.root $InnerChecksums
    if ((Get-Sha256 -Path $sumsPath) -cne [string](Get-Field $record 'inner_checksums_sha256' 'install record')) {
        throw "release root '$($Release.root)' no longer matches its install record ($InnerChecksums changed)"
    }
    if ((Get-Sha256 -Path $Release.server) -cne [string](Get-Field $record 'server_binary_sha256' 'install record')) {
        throw "bin\ninfer-serve.exe of '$($Release.id)' changed after install"
    }
    if ((Get-Sha256 -Path $Release.config_path) -cne [string](Get-Field $record 'config_sha256' 'install record')) {
        throw "server-config.json of '$($Release.id)' changed after install"
    }
    if ($Full) {
        $text = [System.IO.File]::ReadAllText($sumsPath, $Utf8Strict)
        foreach ($line in $text.TrimEnd("`n").Split("`n")) {
            if ($line -cnotmatch '^([0-9a-f]{64})  ([A-Za-z0-9_+./-]+)$' -or $Matches[2].Contains('..')) {
                throw "$InnerChecksums of '$($Release.id)' has a malformed line"
            }
            $expected = $Matches[1]
            $path = Join-Path $Release.root ($Matches[2].Replace('/', '\'))
            if (-not (Test-Path -LiteralPath $path -PathType Leaf) -or (Get-Sha256 -Path $path) -cne $expected) {
                throw "payload file '$($Matches[2])' of '$($Release.id)' is missing or changed after install"
            }
        }
    }
}

function Get-ApiKeyFilePath {
    return (Join-Path (Join-Path $script:Root 'secrets') 'api-key')
}

function Read-ApiKey {
    param([Parameter(Mandatory = $true)][string]$Path, [Parameter(Mandatory = $true)][int]$MinimumBytes)
    if (-not (Test-Path -LiteralPath $Path -PathType Leaf)) {
        throw "bearer key file '$Path' does not exist; Install-Release.ps1 generates one"
    }
    $bytes = [System.IO.File]::ReadAllBytes($Path)
    $length = $bytes.Length
    if ($length -gt 0 -and $bytes[$length - 1] -eq 10) { $length-- }
    if ($length -gt 0 -and $bytes[$length - 1] -eq 13) { $length-- }
    if ($length -lt $MinimumBytes) {
        throw "bearer key file '$Path' holds $length bytes; the server requires at least $MinimumBytes (the key itself is not shown)"
    }
    for ($index = 0; $index -lt $length; $index++) {
        if ($bytes[$index] -le 32 -or $bytes[$index] -ge 127) {
            throw "bearer key file '$Path' must hold one line of printable ASCII without spaces (the key itself is not shown)"
        }
    }
    return [System.Text.Encoding]::ASCII.GetString($bytes, 0, $length)
}

function Get-ModelPath {
    param([Parameter(Mandatory = $true)][object]$Config)
    $name = [string](Get-Field (Get-Field $Config 'model' 'server-config.json') 'local_file_name' 'model')
    if ($name -cnotmatch '^[A-Za-z0-9_.-]+\.ninfer$' -or $name.StartsWith('.')) {
        throw "model.local_file_name '$name' is not a plain .ninfer file name"
    }
    return (Join-Path (Join-Path $script:Root 'models') $name)
}

function Assert-ModelFile {
    param([Parameter(Mandatory = $true)][object]$Config, [switch]$AllowHashing)
    $model = Get-Field $Config 'model' 'server-config.json'
    $path = Get-ModelPath -Config $Config
    $expectedBytes = [long](Get-Field $model 'artifact_bytes' 'model')
    $expectedSha = [string](Get-Field $model 'artifact_sha256' 'model')
    if (-not (Test-Path -LiteralPath $path -PathType Leaf)) {
        throw "model file '$path' is missing; download $($model.artifact_url) ($expectedBytes bytes) and store it under that name"
    }
    if (([System.IO.File]::GetAttributes($path) -band [System.IO.FileAttributes]::ReparsePoint) -ne 0) {
        throw "model file '$path' is a link; store the file itself"
    }
    $item = Get-Item -LiteralPath $path -Force
    if ($item.Length -ne $expectedBytes) {
        throw "model file '$path' has $($item.Length) bytes; the pinned artifact has $expectedBytes (re-download it; do not resume onto an older model file)"
    }
    $markerPath = Join-Path $script:StateDirectory 'model-verified.json'
    $ticks = $item.LastWriteTimeUtc.Ticks
    if (Test-Path -LiteralPath $markerPath -PathType Leaf) {
        $marker = Read-JsonDocument -Path $markerPath
        if ([string]$marker.path -ceq $path -and [long]$marker.bytes -eq $expectedBytes -and [long]$marker.last_write_utc_ticks -eq $ticks -and [string]$marker.sha256 -ceq $expectedSha) {
            return $path
        }
    }
    if (-not $AllowHashing) {
        throw "model file '$path' has not been verified since it last changed; run Control-Release.ps1 -Action Start as Administrator"
    }
    Write-Verbose "hashing '$path' ($expectedBytes bytes)"
    $actual = Get-Sha256 -Path $path
    if ($actual -cne $expectedSha) {
        throw "model file '$path' has SHA-256 $actual; the pinned artifact is $expectedSha"
    }
    $record = [ordered]@{
        artifact_type = 'ninfer_windows_model_verification'
        schema_version = 1
        path = $path
        bytes = $expectedBytes
        last_write_utc_ticks = $ticks
        sha256 = $actual
        verified_utc = [DateTime]::UtcNow.ToString('o', $Invariant)
    }
    Write-TextAtomic -Path $markerPath -Text (($record | ConvertTo-Json -Depth 3) + "`n")
    return $path
}

function Assert-HostMemoryFloor {
    param([Parameter(Mandatory = $true)][object]$Spec)
    $lifecycle = Get-Field $Spec 'lifecycle' 'release-spec.json'
    $floor = Get-Field $lifecycle 'host_memory_floor_mib' 'release-spec.json lifecycle'
    if ($null -eq $floor) {
        return
    }
    $installed = 0
    foreach ($module in @(Get-CimInstance -ClassName Win32_PhysicalMemory)) {
        $installed += [long]$module.Capacity
    }
    $installedMib = [long]($installed / 1048576)
    if ($installedMib -lt [long]$floor) {
        throw "this host has $installedMib MiB of installed memory; the lane's qualified floor is $floor MiB (no smaller-host profile is qualified)"
    }
}

function Get-ListenUrl {
    param([Parameter(Mandatory = $true)][object]$Config)
    $listen = Get-Field $Config 'listen' 'server-config.json'
    $listenHost = [string]$listen.host
    if ($listenHost.Contains(':')) {
        $listenHost = '[' + $listenHost + ']'
    }
    return ('http://' + $listenHost + ':' + [string]$listen.port)
}

function Invoke-LocalHttp {
    param(
        [Parameter(Mandatory = $true)][string]$Uri,
        [string]$Bearer,
        [Parameter(Mandatory = $true)][int]$TimeoutSeconds
    )
    # HttpWebRequest without a proxy: a system proxy must never see the loopback
    # endpoint or the bearer key.
    $request = [System.Net.HttpWebRequest]([System.Net.WebRequest]::Create($Uri))
    $request.Method = 'GET'
    $request.Proxy = $null
    $request.Timeout = $TimeoutSeconds * 1000
    $request.ReadWriteTimeout = $TimeoutSeconds * 1000
    if (-not [string]::IsNullOrEmpty($Bearer)) {
        $request.Headers.Add('Authorization', 'Bearer ' + $Bearer)
    }
    $response = $null
    try {
        $response = $request.GetResponse()
    }
    catch {
        $inner = Get-InnermostException -ErrorRecord $_
        $outer = $_.Exception
        while ($null -ne $outer -and $outer -isnot [System.Net.WebException]) {
            $outer = $outer.InnerException
        }
        if ($null -ne $outer -and $null -ne $outer.Response) {
            $status = [int]$outer.Response.StatusCode
            $outer.Response.Dispose()
            return [pscustomobject]@{ status = $status; body = '' }
        }
        throw "GET $Uri failed: $($inner.Message)"
    }
    try {
        $reader = New-Object System.IO.StreamReader($response.GetResponseStream(), $Utf8NoBom)
        try {
            $body = $reader.ReadToEnd()
        }
        finally {
            $reader.Dispose()
        }
        return [pscustomobject]@{ status = [int]$response.StatusCode; body = $body }
    }
    finally {
        $response.Dispose()
    }
}

function Test-Health {
    param([Parameter(Mandatory = $true)][object]$Config)
    try {
        $response = Invoke-LocalHttp -Uri ((Get-ListenUrl -Config $Config) + '/health') -TimeoutSeconds 5
        return ($response.status -eq 200)
    }
    catch {
        return $false
    }
}

function Assert-ServedIdentity {
    param([Parameter(Mandatory = $true)][object]$Release)
    $minimum = [int]$Release.config.auth.minimum_key_bytes
    $key = Read-ApiKey -Path (Get-ApiKeyFilePath) -MinimumBytes $minimum
    try {
        $response = Invoke-LocalHttp -Uri ((Get-ListenUrl -Config $Release.config) + '/v1/ninfer/status') -Bearer $key -TimeoutSeconds 10
    }
    finally {
        $key = $null
    }
    if ($response.status -ne 200) {
        throw "the server's authenticated status answered HTTP $($response.status)"
    }
    $content = [string]$response.body
    foreach ($expected in @([string]$Release.record.server_binary_sha256, [string]$Release.record.config_sha256, [string]$Release.config.model.artifact_sha256)) {
        if (-not $content.Contains($expected)) {
            throw "the server's status does not report $expected; another binary, configuration or model is serving"
        }
    }
}

function Read-RuntimeState {
    $path = Join-Path $script:StateDirectory 'runtime.json'
    if (-not (Test-Path -LiteralPath $path -PathType Leaf)) {
        return $null
    }
    try {
        $runtime = Read-JsonDocument -Path $path
        if ([string]$runtime.artifact_type -cne 'ninfer_windows_runtime_state') {
            return $null
        }
        return $runtime
    }
    catch {
        return $null
    }
}

function Get-OwnedProcess {
    param([AllowNull()][object]$Runtime)
    if ($null -eq $Runtime) {
        return $null
    }
    $process = Get-Process -Id ([int]$Runtime.pid) -ErrorAction SilentlyContinue
    if ($null -eq $process) {
        return $null
    }
    try {
        if ($process.StartTime.ToUniversalTime().Ticks -ne [long]$Runtime.start_time_utc_ticks) {
            return $null
        }
    }
    catch {
        return $null
    }
    $cim = Get-CimInstance -ClassName Win32_Process -Filter ('ProcessId = ' + [int]$Runtime.pid) -ErrorAction SilentlyContinue
    if ($null -eq $cim -or [string]::IsNullOrEmpty([string]$cim.ExecutablePath)) {
        return $null
    }
    if (-not [string]::Equals([System.IO.Path]::GetFullPath([string]$cim.ExecutablePath), [System.IO.Path]::GetFullPath([string]$Runtime.server_path), [System.StringComparison]::OrdinalIgnoreCase)) {
        return $null
    }
    return $process
}

function Invoke-LaneScript {
    param(
        [Parameter(Mandatory = $true)][object]$Release,
        [Parameter(Mandatory = $true)][string]$Name,
        [Parameter(Mandatory = $true)][hashtable]$Arguments
    )
    $path = Join-Path $Release.root $Name
    $sums = [System.IO.File]::ReadAllText((Join-Path $Release.root $InnerChecksums), $Utf8Strict)
    $expected = $null
    foreach ($line in $sums.TrimEnd("`n").Split("`n")) {
        if ($line -cmatch '^([0-9a-f]{64})  (.+)$' -and $Matches[2] -ceq $Name) {
            $expected = $Matches[1]
        }
    }
    if ($null -eq $expected -or (Get-Sha256 -Path $path) -cne $expected) {
        throw "$Name of the active release is missing from $InnerChecksums or changed after install"
    }
    $output = @(& $path @Arguments)
    return (($output | ForEach-Object { [string]$_ }) -join "`n")
}

function Get-TaskName {
    param([Parameter(Mandatory = $true)][object]$Release)
    $name = [string](Get-Field (Get-Field $Release.spec 'lifecycle' 'release-spec.json') 'task_name' 'release-spec.json lifecycle')
    if ($name -cnotmatch '^NInfer-[A-Za-z0-9-]+$') {
        throw "release-spec.json lifecycle.task_name '$name' is not valid"
    }
    return $name
}

function Register-LaneTask {
    param([Parameter(Mandatory = $true)][object]$Release)
    $powershell = Join-Path ([Environment]::GetFolderPath('System')) 'WindowsPowerShell\v1.0\powershell.exe'
    $controller = Join-Path $Release.root 'Control-Release.ps1'
    $argumentLine = '-NoLogo -NoProfile -NonInteractive -ExecutionPolicy Bypass -File ' +
        (ConvertTo-CommandLineArgument -Value $controller) + ' -Action Serve -StateRoot ' +
        (ConvertTo-CommandLineArgument -Value $script:Root) + ' -ServiceAccount ' +
        (ConvertTo-CommandLineArgument -Value $ServiceAccount)
    $taskAction = New-ScheduledTaskAction -Execute $powershell -Argument $argumentLine -WorkingDirectory $Release.root
    $principal = New-ScheduledTaskPrincipal -UserId $ServiceAccount -LogonType ServiceAccount -RunLevel Limited
    $settings = New-ScheduledTaskSettingsSet -ExecutionTimeLimit ([TimeSpan]::Zero) -MultipleInstances IgnoreNew -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries
    [void](Register-ScheduledTask -TaskName (Get-TaskName -Release $Release) -TaskPath $TaskPath -Action $taskAction -Principal $principal -Settings $settings -Force)
}

function Get-LaneTask {
    param([Parameter(Mandatory = $true)][string]$Name)
    return (Get-ScheduledTask -TaskName $Name -TaskPath $TaskPath -ErrorAction SilentlyContinue)
}

function Get-GpuUuid {
    $path = Join-Path $script:StateDirectory 'gpu-uuid'
    if (-not [string]::IsNullOrEmpty($GpuUuid)) {
        return $GpuUuid
    }
    if (Test-Path -LiteralPath $path -PathType Leaf) {
        $value = [System.IO.File]::ReadAllText($path, $Utf8Strict).TrimEnd("`n")
        if ($value -match '^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$') {
            return $value
        }
    }
    throw 'no GPU is bound to this lane yet; pass -GpuUuid (nvidia-smi --query-gpu=uuid,name --format=csv lists them)'
}

function Stop-Launch {
    param([Parameter(Mandatory = $true)][object]$Release)
    $started = [DateTime]::UtcNow
    $runtime = Read-RuntimeState
    $owned = Get-OwnedProcess -Runtime $runtime
    $timeout = [int](Get-Field (Get-Field $Release.spec 'lifecycle' 'release-spec.json') 'graceful_stop_timeout_seconds' 'release-spec.json lifecycle')
    if ($timeout -lt 1 -or $timeout -gt 3600) {
        throw "release-spec.json lifecycle.graceful_stop_timeout_seconds $timeout is out of range"
    }
    $receipt = [ordered]@{
        artifact_type = 'ninfer_windows_managed_stop_receipt'
        schema_version = 1
        release_id = $(if ($null -eq $runtime) { $Release.id } else { [string]$runtime.release_id })
        mode = 'stop-event'
        graceful_wait_seconds = $timeout
        outcome = 'already_stopped'
        forced = $false
        exit_code = $null
        reason = $null
        pid = $(if ($null -eq $owned) { $null } else { $owned.Id })
        started_utc = $started.ToString('o', $Invariant)
        completed_utc = $null
    }
    if ($null -ne $owned) {
        $eventName = [string]$runtime.stop_event
        if ($eventName -cnotmatch $StopEventPattern) {
            $receipt.outcome = 'terminated'
            $receipt.reason = 'the launch record names no valid stop event'
        }
        else {
            $created = $false
            $handle = $null
            try {
                # Open the server's event, or create it signalled-to-be so that a
                # server still starting up sees the request when it opens the name.
                $handle = [System.Threading.EventWaitHandle]::new($false, [System.Threading.EventResetMode]::ManualReset, $eventName, [ref]$created)
                [void]$handle.Set()
                $receipt.outcome = 'graceful'
                if (-not $owned.WaitForExit($timeout * 1000)) {
                    $receipt.outcome = 'graceful_wait_expired'
                    $receipt.reason = "the server did not exit within $timeout s of the stop request"
                }
            }
            catch {
                if ((Get-InnermostException -ErrorRecord $_) -isnot [System.UnauthorizedAccessException]) {
                    throw
                }
                $receipt.outcome = 'signal_failed'
                $receipt.reason = 'the stop event exists but this session may not signal it'
            }
            finally {
                if ($null -ne $handle) {
                    $handle.Dispose()
                }
            }
        }
        if (-not $owned.HasExited) {
            $task = Get-LaneTask -Name (Get-TaskName -Release $Release)
            if ($null -ne $task) {
                Stop-ScheduledTask -TaskName $task.TaskName -TaskPath $TaskPath -ErrorAction SilentlyContinue
            }
            if (-not $owned.WaitForExit(15000)) {
                Stop-Process -Id $owned.Id -Force
                [void]$owned.WaitForExit(15000)
            }
            $receipt.forced = $true
            if ($receipt.outcome -ceq 'graceful') {
                $receipt.outcome = 'terminated'
            }
        }
        try {
            $receipt.exit_code = $owned.ExitCode
        }
        catch {
            $receipt.exit_code = $null
        }
    }
    # The Serve wrapper exits right after its server; wait for the task to go idle.
    $task = Get-LaneTask -Name (Get-TaskName -Release $Release)
    $deadline = [DateTime]::UtcNow.AddSeconds(60)
    while ($null -ne $task -and [string]$task.State -ceq 'Running' -and [DateTime]::UtcNow -lt $deadline) {
        Start-Sleep -Milliseconds 500
        $task = Get-LaneTask -Name (Get-TaskName -Release $Release)
    }
    if ($null -ne $task -and [string]$task.State -ceq 'Running') {
        Stop-ScheduledTask -TaskName $task.TaskName -TaskPath $TaskPath
    }
    if ($null -ne (Get-OwnedProcess -Runtime (Read-RuntimeState))) {
        $receipt.outcome = 'still_running'
        throw "the server process $($receipt.pid) survived termination"
    }
    $runtimePath = Join-Path $script:StateDirectory 'runtime.json'
    if (Test-Path -LiteralPath $runtimePath -PathType Leaf) {
        Remove-Item -LiteralPath $runtimePath -Force
    }
    [void](Invoke-LaneScript -Release $Release -Name 'Control-GpuOwner.ps1' -Arguments @{ Action = 'Release'; StateRoot = $script:Root })
    $receipt.completed_utc = [DateTime]::UtcNow.ToString('o', $Invariant)
    Write-TextAtomic -Path (Join-Path $script:StateDirectory 'last-stop.json') -Text (($receipt | ConvertTo-Json -Depth 3) + "`n")
    return $receipt
}

function Start-Launch {
    param([Parameter(Mandatory = $true)][object]$Release)
    if ($null -ne (Get-OwnedProcess -Runtime (Read-RuntimeState))) {
        Assert-ServedIdentity -Release $Release
        return (Get-StatusObject -Outcome 'already_running')
    }
    Assert-ReleaseBytes -Release $Release -Full
    [void](Invoke-LaneScript -Release $Release -Name 'Protect-StateRoot.ps1' -Arguments @{ StateRoot = $script:Root; ServiceAccount = $ServiceAccount; VerifyOnly = $true })
    Assert-HostMemoryFloor -Spec $Release.spec
    [void](Read-ApiKey -Path (Get-ApiKeyFilePath) -MinimumBytes ([int]$Release.config.auth.minimum_key_bytes))
    [void](Assert-ModelFile -Config $Release.config -AllowHashing)
    $port = [int]$Release.config.listen.port
    if ($null -ne (Get-NetTCPConnection -State Listen -LocalPort $port -ErrorAction SilentlyContinue)) {
        throw "port $port is already in use by another process"
    }
    $uuid = Get-GpuUuid
    [void](Invoke-LaneScript -Release $Release -Name 'Control-GpuOwner.ps1' -Arguments @{ Action = 'Acquire'; StateRoot = $script:Root; GpuUuid = $uuid; ReleaseRoot = $Release.root })
    Write-TextAtomic -Path (Join-Path $script:StateDirectory 'gpu-uuid') -Text ($uuid + "`n")
    try {
        Register-LaneTask -Release $Release
        $taskName = Get-TaskName -Release $Release
        Start-ScheduledTask -TaskName $taskName -TaskPath $TaskPath
        $begun = [DateTime]::UtcNow
        $deadline = $begun.AddSeconds($ReadyTimeoutSeconds)
        $seenProcess = $false
        while ($true) {
            $owned = Get-OwnedProcess -Runtime (Read-RuntimeState)
            if ($null -ne $owned) {
                $seenProcess = $true
                if (Test-Health -Config $Release.config) {
                    break
                }
            }
            else {
                $task = Get-LaneTask -Name $taskName
                $taskRunning = ($null -ne $task -and [string]$task.State -ceq 'Running')
                $elapsed = ([DateTime]::UtcNow - $begun).TotalSeconds
                if ($seenProcess -or $elapsed -gt 60 -or ((-not $taskRunning) -and $elapsed -gt 10)) {
                    throw "the server exited or never started; see $(Join-Path $script:Root 'logs') and the task history of $taskName"
                }
            }
            if ([DateTime]::UtcNow -gt $deadline) {
                throw "the server did not answer /health within $ReadyTimeoutSeconds s"
            }
            Start-Sleep -Seconds 2
        }
        Assert-ServedIdentity -Release $Release
    }
    catch {
        $failure = $_
        try {
            [void](Stop-Launch -Release $Release)
        }
        catch {
            Write-Warning "cleanup after the failed start was incomplete: $($_.Exception.Message)"
        }
        throw $failure
    }
    return (Get-StatusObject -Outcome 'started')
}

function Invoke-Serve {
    $release = Get-ActiveRelease
    Assert-ReleaseBytes -Release $release
    $config = $release.config
    $apiKeyFile = Get-ApiKeyFilePath
    [void](Read-ApiKey -Path $apiKeyFile -MinimumBytes ([int]$config.auth.minimum_key_bytes))
    $modelPath = Assert-ModelFile -Config $config
    $leasePath = Join-Path $script:StateDirectory 'gpu-owner.json'
    if (-not (Test-Path -LiteralPath $leasePath -PathType Leaf)) {
        throw 'no GPU-owner lease is held; start the lane with Control-Release.ps1 -Action Start'
    }
    $lease = Read-JsonDocument -Path $leasePath
    $uuid = [string](Get-Field $lease 'gpu_uuid' 'GPU-owner lease')
    $arguments = Get-ServerArgumentList -Config $config -ModelPath $modelPath -ApiKeyFile $apiKeyFile `
        -BinaryHash ([string]$release.record.server_binary_sha256) -ArtifactHash ([string]$config.model.artifact_sha256) `
        -ConfigHash ([string]$release.record.config_sha256) -ReleaseInstanceId $release.instance_id
    $stopEvent = $arguments[$arguments.Count - 1]
    $existing = $null
    if ([System.Threading.EventWaitHandle]::TryOpenExisting($stopEvent, [ref]$existing)) {
        $existing.Dispose()
        throw "the stop event $stopEvent is still held by an earlier launch; stop it with Control-Release.ps1 -Action Stop"
    }
    $checkpointDirectory = $arguments[[Array]::IndexOf($arguments, '--session-checkpoint-dir') + 1]
    $requestLog = $arguments[[Array]::IndexOf($arguments, '--request-log-jsonl') + 1]
    [void][System.IO.Directory]::CreateDirectory($checkpointDirectory)
    $logDirectory = [System.IO.Path]::GetDirectoryName($requestLog)
    [void][System.IO.Directory]::CreateDirectory($logDirectory)

    $env:CUDA_DEVICE_ORDER = 'PCI_BUS_ID'
    $env:CUDA_VISIBLE_DEVICES = $uuid
    $argumentLine = (@($arguments | ForEach-Object { ConvertTo-CommandLineArgument -Value $_ }) -join ' ')
    $process = Start-Process -FilePath $release.server -ArgumentList $argumentLine -WorkingDirectory $release.root `
        -RedirectStandardOutput (Join-Path $logDirectory 'stdout.log') -RedirectStandardError (Join-Path $logDirectory 'stderr.log') `
        -NoNewWindow -PassThru
    # Keep the process handle so that the exit code stays readable after exit.
    $null = $process.Handle
    $runtimePath = Join-Path $script:StateDirectory 'runtime.json'
    $runtime = [ordered]@{
        artifact_type = 'ninfer_windows_runtime_state'
        schema_version = 1
        release_id = $release.id
        release_instance_id = $release.instance_id
        pid = $process.Id
        start_time_utc_ticks = $process.StartTime.ToUniversalTime().Ticks
        server_path = $release.server
        stop_event = $stopEvent
        gpu_uuid = $uuid
        started_utc = [DateTime]::UtcNow.ToString('o', $Invariant)
    }
    Write-TextAtomic -Path $runtimePath -Text (($runtime | ConvertTo-Json -Depth 3) + "`n")
    try {
        $process.WaitForExit()
        $code = $process.ExitCode
    }
    finally {
        $current = Read-RuntimeState
        if ($null -ne $current -and [int]$current.pid -eq $process.Id -and (Test-Path -LiteralPath $runtimePath -PathType Leaf)) {
            Remove-Item -LiteralPath $runtimePath -Force
        }
    }
    exit $code
}

function Get-StatusObject {
    param([Parameter(Mandatory = $true)][string]$Outcome)
    $active = Read-StatePointer -Name 'active_release'
    $release = $null
    $releaseError = $null
    try {
        $release = Get-ActiveRelease
    }
    catch {
        $releaseError = $_.Exception.Message
    }
    $runtime = Read-RuntimeState
    $owned = Get-OwnedProcess -Runtime $runtime
    $taskState = 'missing'
    $endpoint = 'unavailable'
    $gpu = $null
    if ($null -ne $release) {
        $task = Get-LaneTask -Name (Get-TaskName -Release $release)
        if ($null -ne $task) {
            $taskState = [string]$task.State
        }
        if ($null -ne $owned -and (Test-Health -Config $release.config)) {
            $endpoint = 'ready'
        }
        try {
            $gpu = ConvertFrom-Json -InputObject (Invoke-LaneScript -Release $release -Name 'Control-GpuOwner.ps1' -Arguments @{ Action = 'Status'; StateRoot = $script:Root })
        }
        catch {
            $gpu = [ordered]@{ error = $_.Exception.Message }
        }
    }
    $leaseHeld = Test-Path -LiteralPath (Join-Path $script:StateDirectory 'gpu-owner.json') -PathType Leaf
    $keyPath = Get-ApiKeyFilePath
    $lastStopPath = Join-Path $script:StateDirectory 'last-stop.json'
    return [ordered]@{
        artifact_type = 'ninfer_windows_lifecycle_status'
        schema_version = 1
        outcome = $Outcome
        state_root = $script:Root
        active_release = $active
        previous_release = (Read-StatePointer -Name 'previous_release')
        prepared_release = $(if (Test-Path -LiteralPath (Join-Path $script:StateDirectory 'prepared_release')) { 'present' } else { $null })
        release_instance_id = $(if ($null -eq $release) { $null } else { $release.instance_id })
        release_error = $releaseError
        config_sha256 = $(if ($null -eq $release) { $null } else { [string]$release.record.config_sha256 })
        server_binary_sha256 = $(if ($null -eq $release) { $null } else { [string]$release.record.server_binary_sha256 })
        task_state = $taskState
        process_state = $(if ($null -eq $owned) { 'stopped' } else { 'running' })
        pid = $(if ($null -eq $owned) { $null } else { $owned.Id })
        endpoint_state = $endpoint
        owner_restoration_pending = ($leaseHeld -and $null -eq $owned)
        gpu_owner = $gpu
        api_key_file_present = (Test-Path -LiteralPath $keyPath -PathType Leaf)
        last_stop = $(if (Test-Path -LiteralPath $lastStopPath -PathType Leaf) { Read-JsonDocument -Path $lastStopPath } else { $null })
    }
}

$script:Root = Resolve-StateRoot -Path $StateRoot
$script:StateDirectory = Join-Path $script:Root 'state'

if ($Action -eq 'Serve') {
    Invoke-Serve
    return
}
if ($Action -eq 'Status') {
    Write-Output ((Get-StatusObject -Outcome 'status') | ConvertTo-Json -Depth 8)
    return
}

$lockPath = Join-Path $script:StateDirectory 'lifecycle.lock'
$lock = $null
try {
    $lock = [System.IO.File]::Open($lockPath, [System.IO.FileMode]::OpenOrCreate, [System.IO.FileAccess]::ReadWrite, [System.IO.FileShare]::None)
}
catch {
    if ((Get-InnermostException -ErrorRecord $_) -is [System.IO.IOException]) {
        throw "another install or control operation holds '$lockPath'; wait for it to finish"
    }
    throw
}
try {
    $release = Get-ActiveRelease
    switch ($Action) {
        'Start' { $result = Start-Launch -Release $release }
        'Stop' { $result = Stop-Launch -Release $release }
        'Restart' {
            [void](Stop-Launch -Release $release)
            $result = Start-Launch -Release $release
        }
    }
}
finally {
    $lock.Dispose()
}
Write-Output ($result | ConvertTo-Json -Depth 8)
