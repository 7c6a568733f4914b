<#
.SYNOPSIS
Takes, reports and gives back ownership of the lane's GPU for one native NInfer lane.

.DESCRIPTION
The GPU belongs to its owner (the person whose workstation it is).  While the
lane serves, this controller holds a lease on exactly one GPU, named by its UUID:

  Acquire  Checks that the GPU with that UUID is the lane's GPU (name and driver
           branch from release-spec.json), refuses when another process holds at
           least 1 GiB of its memory (server-config.json runtime_host
           foreign_gpu_memory_limit_mib), records the owner's current power limit
           (nvidia-smi --query-gpu=power.limit) in the lease file before changing
           anything, then applies the lane's serving power limit
           (nvidia-smi -i <uuid> -pl <W>) when the lane declares one (RTX 3090:
           300 W; RTX 4090: none) and reads it back.
  Release  Restores the owner's recorded power limit, reads it back and removes the
           lease.  Refuses while the lane's server process is still running.
  Status   Reports the lease, the GPU's current power limit and memory, and the
           compute processes on that GPU.

The lease lives in <StateRoot>\state\gpu-owner.json and is written atomically.
Acquire is idempotent for the same UUID; a lease for another UUID is refused.
Changing a power limit needs an elevated session.

.PARAMETER Action
Acquire, Release or Status.

.PARAMETER StateRoot
The lane's protected state root.

.PARAMETER GpuUuid
The GPU's UUID as nvidia-smi prints it (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).
Required for Acquire; Release and Status use the lease's UUID when it is omitted.

.PARAMETER ReleaseRoot
The release root whose release-spec.json and server-config.json declare the GPU
policy.  Default: the active release (<StateRoot>\state\active_release).

.PARAMETER Force
Release even though the server process still appears to run.

.OUTPUTS
One JSON object (ninfer_windows_gpu_owner_status).

.EXAMPLE
.\Control-GpuOwner.ps1 -Action Acquire -StateRoot C:\ProgramData\NInfer\qwen38-3090-native -GpuUuid GPU-01234567-89ab-cdef-0123-456789abcdef
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)]
    [ValidateSet('Acquire', 'Release', 'Status')]
    [string]$Action,

    [Parameter(Mandatory = $true)]
    [ValidateNotNullOrEmpty()]
    [string]$StateRoot,

    [ValidatePattern('^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')]
    [string]$GpuUuid,

    [string]$ReleaseRoot,

    [switch]$Force
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

$Invariant = [System.Globalization.CultureInfo]::InvariantCulture
$Utf8Strict = New-Object System.Text.UTF8Encoding($false, $true)
$ReleaseIdPattern = '^[a-z0-9][a-z0-9.-]{0,127}$'

function Resolve-StateRoot {
    param([Parameter(Mandatory = $true)][string]$Path)
    $resolved = [System.IO.Path]::GetFullPath($ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Path))
    if ($resolved -notmatch '^[A-Za-z]:\\') {
        throw "state root must be an absolute local drive path (found '$Path')"
    }
    $resolved = $resolved.TrimEnd('\')
    $cursor = $resolved
    while (-not [string]::IsNullOrEmpty($cursor)) {
        if (Test-Path -LiteralPath $cursor) {
            if (([System.IO.File]::GetAttributes($cursor) -band [System.IO.FileAttributes]::ReparsePoint) -ne 0) {
                throw "refusing state root '$resolved': '$cursor' is a junction, symbolic link or other reparse point"
            }
        }
        $parent = [System.IO.Path]::GetDirectoryName($cursor)
        if ([string]::IsNullOrEmpty($parent) -or $parent -eq $cursor) { break }
        $cursor = $parent
    }
    if (-not (Test-Path -LiteralPath $resolved -PathType Container)) {
        throw "state root '$resolved' does not exist; run Protect-StateRoot.ps1 first"
    }
    return $resolved
}

function Read-JsonDocument {
    param([Parameter(Mandatory = $true)][string]$Path)
    if (-not (Test-Path -LiteralPath $Path -PathType Leaf)) {
        throw "required file '$Path' does not exist"
    }
    $text = [System.IO.File]::ReadAllText($Path, $Utf8Strict)
    return (ConvertFrom-Json -InputObject $text)
}

function Get-Field {
    param(
        [Parameter(Mandatory = $true)][AllowNull()][object]$Object,
        [Parameter(Mandatory = $true)][string]$Name,
        [Parameter(Mandatory = $true)][string]$Where
    )
    $property = $Object.PSObject.Properties[$Name]
    if ($null -eq $property) {
        throw "$Where has no field '$Name'"
    }
    return $property.Value
}

function Write-TextAtomic {
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][string]$Text
    )
    $directory = [System.IO.Path]::GetDirectoryName($Path)
    $temporary = Join-Path $directory ('.' + [System.IO.Path]::GetFileName($Path) + '.' + [guid]::NewGuid().ToString('N') + '.tmp')
    $bytes = (New-Object System.Text.UTF8Encoding($false)).GetBytes($Text.Replace("`r`n", "`n") + "`n")
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

function Get-NvidiaSmiPath {
    $candidates = @(
        (Join-Path ([Environment]::GetFolderPath('System')) 'nvidia-smi.exe'),
        (Join-Path $env:ProgramFiles 'NVIDIA Corporation\NVSMI\nvidia-smi.exe')
    )
    foreach ($candidate in $candidates) {
        if (Test-Path -LiteralPath $candidate -PathType Leaf) {
            return $candidate
        }
    }
    throw 'nvidia-smi.exe was not found in System32 or in Program Files\NVIDIA Corporation\NVSMI; install the NVIDIA driver'
}

function Invoke-NvidiaSmi {
    param([Parameter(Mandatory = $true)][string[]]$Arguments)
    $executable = Get-NvidiaSmiPath
    # Windows PowerShell 5.1 turns native stderr into error records; with
    # ErrorActionPreference Stop that would abort before the exit code is read.
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $all = @(& $executable @Arguments 2>&1)
        $code = $LASTEXITCODE
    }
    finally {
        $ErrorActionPreference = $previous
    }
    $stdout = @($all | Where-Object { $_ -isnot [System.Management.Automation.ErrorRecord] } | ForEach-Object { [string]$_ })
    if ($code -ne 0) {
        throw "nvidia-smi $($Arguments -join ' ') failed with exit code ${code}: $((@($all | ForEach-Object { [string]$_ }) -join ' ').Trim())"
    }
    return $stdout
}

function ConvertTo-Watts {
    param([Parameter(Mandatory = $true)][string]$Text, [Parameter(Mandatory = $true)][string]$Field)
    $value = 0.0
    $clean = $Text.Trim()
    if (-not [double]::TryParse($clean, [System.Globalization.NumberStyles]::Float, $Invariant, [ref]$value)) {
        throw "nvidia-smi reported '$clean' for $Field; the GPU does not expose a software power limit"
    }
    return $value
}

function Format-Watts {
    param([Parameter(Mandatory = $true)][double]$Watts)
    return $Watts.ToString('0.##', $Invariant)
}

function Get-GpuState {
    param([Parameter(Mandatory = $true)][string]$Uuid)
    $query = 'uuid,name,driver_version,power.limit,power.min_limit,power.max_limit,memory.used'
    $lines = @(Invoke-NvidiaSmi -Arguments @("--query-gpu=$query", '--format=csv,noheader,nounits', '-i', $Uuid))
    $rows = @($lines | Where-Object { $_.Trim().Length -gt 0 })
    if ($rows.Count -ne 1) {
        throw "nvidia-smi returned $($rows.Count) rows for GPU $Uuid; expected exactly one"
    }
    $parts = @($rows[0].Split(',') | ForEach-Object { $_.Trim() })
    if ($parts.Count -ne 7) {
        throw "nvidia-smi returned an unexpected row for GPU ${Uuid}: '$($rows[0])'"
    }
    if ($parts[0] -ne $Uuid) {
        throw "nvidia-smi answered for GPU $($parts[0]) when asked for $Uuid"
    }
    $memoryUsed = 0
    if (-not [int]::TryParse($parts[6], [System.Globalization.NumberStyles]::Integer, $Invariant, [ref]$memoryUsed)) {
        throw "nvidia-smi reported '$($parts[6])' as memory.used of GPU $Uuid"
    }
    return [pscustomobject]@{
        uuid = $parts[0]
        name = $parts[1]
        driver_version = $parts[2]
        power_limit_watts = (ConvertTo-Watts -Text $parts[3] -Field 'power.limit')
        power_min_limit_watts = (ConvertTo-Watts -Text $parts[4] -Field 'power.min_limit')
        power_max_limit_watts = (ConvertTo-Watts -Text $parts[5] -Field 'power.max_limit')
        memory_used_mib = $memoryUsed
    }
}

function Get-ComputeProcesses {
    param([Parameter(Mandatory = $true)][string]$Uuid)
    $lines = @(Invoke-NvidiaSmi -Arguments @('--query-compute-apps=gpu_uuid,pid,process_name,used_memory', '--format=csv,noheader,nounits'))
    $result = New-Object System.Collections.Generic.List[object]
    foreach ($line in $lines) {
        if ($line.Trim().Length -eq 0 -or $line -match '^No running') { continue }
        $parts = @($line.Split(',') | ForEach-Object { $_.Trim() })
        if ($parts.Count -lt 4 -or $parts[0] -ne $Uuid) { continue }
        $used = $null
        $parsed = 0
        if ([int]::TryParse($parts[$parts.Count - 1], [System.Globalization.NumberStyles]::Integer, $Invariant, [ref]$parsed)) {
            $used = $parsed
        }
        $name = (@($parts[2..($parts.Count - 2)]) -join ',')
        $result.Add([pscustomobject]@{ pid = $parts[1]; process_name = $name; used_memory_mib = $used })
    }
    return $result.ToArray()
}

function Get-ActiveReleaseRoot {
    param([Parameter(Mandatory = $true)][string]$Root)
    $pointer = Join-Path (Join-Path $Root 'state') 'active_release'
    if (-not (Test-Path -LiteralPath $pointer -PathType Leaf)) {
        throw "no active release in '$Root' (state\active_release is missing); install a release first or pass -ReleaseRoot"
    }
    $releaseId = [System.IO.File]::ReadAllText($pointer, $Utf8Strict)
    if (-not $releaseId.EndsWith("`n")) {
        throw "state pointer '$pointer' is not terminated by LF; run Install-Release.ps1 -RepairInterruptedInstall"
    }
    $releaseId = $releaseId.Substring(0, $releaseId.Length - 1)
    if ($releaseId -cnotmatch $ReleaseIdPattern) {
        throw "state pointer '$pointer' does not hold a release id"
    }
    return (Join-Path (Join-Path $Root 'releases') $releaseId)
}

function Get-LanePolicy {
    param([Parameter(Mandatory = $true)][string]$Root)
    $spec = Read-JsonDocument -Path (Join-Path $Root 'release-spec.json')
    $config = Read-JsonDocument -Path (Join-Path $Root 'server-config.json')
    if ((Get-Field $spec 'artifact_type' 'release-spec.json') -cne 'ninfer_windows_release_spec') {
        throw "'$Root\release-spec.json' is not a ninfer_windows_release_spec"
    }
    if ((Get-Field $config 'artifact_type' 'server-config.json') -cne 'ninfer_windows_server_config') {
        throw "'$Root\server-config.json' is not a ninfer_windows_server_config"
    }
    $gpu = Get-Field $spec 'gpu' 'release-spec.json'
    $lifecycle = Get-Field $spec 'lifecycle' 'release-spec.json'
    $runtimeHost = Get-Field $config 'runtime_host' 'server-config.json'
    $specLimit = Get-Field $lifecycle 'power_limit_watts' 'release-spec.json lifecycle'
    $configLimit = Get-Field $runtimeHost 'serving_power_limit_watts' 'server-config.json runtime_host'
    if ((($null -eq $specLimit) -ne ($null -eq $configLimit)) -or (($null -ne $specLimit) -and ([int]$specLimit -ne [int]$configLimit))) {
        throw "release-spec.json lifecycle.power_limit_watts ($specLimit) and server-config.json runtime_host.serving_power_limit_watts ($configLimit) disagree"
    }
    $binding = Get-Field $runtimeHost 'gpu_binding' 'server-config.json runtime_host'
    if ($binding -cne 'uuid') {
        throw "server-config.json runtime_host.gpu_binding is '$binding'; this controller binds by UUID only"
    }
    return [pscustomobject]@{
        gpu_name = [string](Get-Field $gpu 'name' 'release-spec.json gpu')
        minimum_driver_major = [int](Get-Field $gpu 'minimum_driver_major' 'release-spec.json gpu')
        serving_power_limit_watts = $configLimit
        foreign_memory_limit_mib = [int](Get-Field $runtimeHost 'foreign_gpu_memory_limit_mib' 'server-config.json runtime_host')
    }
}

function Read-Lease {
    param([Parameter(Mandatory = $true)][string]$Path)
    if (-not (Test-Path -LiteralPath $Path -PathType Leaf)) {
        return $null
    }
    $lease = Read-JsonDocument -Path $Path
    if ((Get-Field $lease 'artifact_type' 'GPU-owner lease') -cne 'ninfer_gpu_owner_lease' -or [int](Get-Field $lease 'schema_version' 'GPU-owner lease') -ne 1) {
        throw "GPU-owner lease '$Path' has an unknown format; inspect it and restore the power limit by hand before removing it"
    }
    return $lease
}

function Test-ServerRunning {
    param([Parameter(Mandatory = $true)][string]$Root)
    $runtimePath = Join-Path (Join-Path $Root 'state') 'runtime.json'
    if (-not (Test-Path -LiteralPath $runtimePath -PathType Leaf)) {
        return $false
    }
    $runtime = Read-JsonDocument -Path $runtimePath
    $processId = [int](Get-Field $runtime 'pid' 'runtime.json')
    $process = Get-Process -Id $processId -ErrorAction SilentlyContinue
    if ($null -eq $process) {
        return $false
    }
    $ticks = [long](Get-Field $runtime 'start_time_utc_ticks' 'runtime.json')
    return ($process.StartTime.ToUniversalTime().Ticks -eq $ticks)
}

function Set-PowerLimit {
    param(
        [Parameter(Mandatory = $true)][string]$Uuid,
        [Parameter(Mandatory = $true)][double]$Watts
    )
    [void](Invoke-NvidiaSmi -Arguments @('-i', $Uuid, '-pl', (Format-Watts -Watts $Watts)))
    $after = Get-GpuState -Uuid $Uuid
    if ([Math]::Abs($after.power_limit_watts - $Watts) -gt 0.5) {
        throw "GPU $Uuid reports a power limit of $(Format-Watts -Watts $after.power_limit_watts) W after setting $(Format-Watts -Watts $Watts) W"
    }
}

function New-StatusObject {
    param(
        [Parameter(Mandatory = $true)][string]$Outcome,
        [string]$Uuid,
        [object]$Lease
    )
    $current = $null
    $processes = @()
    if (-not [string]::IsNullOrEmpty($Uuid)) {
        $current = Get-GpuState -Uuid $Uuid
        $processes = @(Get-ComputeProcesses -Uuid $Uuid)
    }
    return [ordered]@{
        artifact_type = 'ninfer_windows_gpu_owner_status'
        schema_version = 1
        action = $Action
        outcome = $Outcome
        gpu_uuid = $(if ([string]::IsNullOrEmpty($Uuid)) { $null } else { $Uuid })
        lease = $Lease
        current = $current
        compute_processes = $processes
    }
}

$root = Resolve-StateRoot -Path $StateRoot
$stateDirectory = Join-Path $root 'state'
if (-not (Test-Path -LiteralPath $stateDirectory -PathType Container)) {
    [void][System.IO.Directory]::CreateDirectory($stateDirectory)
}
$leasePath = Join-Path $stateDirectory 'gpu-owner.json'
$lease = Read-Lease -Path $leasePath

if ($Action -eq 'Status') {
    $uuid = $GpuUuid
    if ([string]::IsNullOrEmpty($uuid) -and $null -ne $lease) {
        $uuid = [string]$lease.gpu_uuid
    }
    $outcome = $(if ($null -eq $lease) { 'not_held' } else { 'held' })
    Write-Output ((New-StatusObject -Outcome $outcome -Uuid $uuid -Lease $lease) | ConvertTo-Json -Depth 6)
    return
}

if ($Action -eq 'Release') {
    if ($null -eq $lease) {
        Write-Output ((New-StatusObject -Outcome 'not_held' -Uuid $GpuUuid -Lease $null) | ConvertTo-Json -Depth 6)
        return
    }
    $uuid = [string]$lease.gpu_uuid
    if (-not [string]::IsNullOrEmpty($GpuUuid) -and $GpuUuid -ne $uuid) {
        throw "the lease holds GPU $uuid, not $GpuUuid"
    }
    if ((Test-ServerRunning -Root $root) -and -not $Force) {
        throw 'the lane server still runs; stop it with Control-Release.ps1 -Action Stop before releasing the GPU'
    }
    if ($null -ne $lease.serving_power_limit_watts) {
        $ownerLimit = [double]$lease.owner_power_limit_watts
        Set-PowerLimit -Uuid $uuid -Watts $ownerLimit
    }
    Remove-Item -LiteralPath $leasePath -Force
    Write-Output ((New-StatusObject -Outcome 'released' -Uuid $uuid -Lease $lease) | ConvertTo-Json -Depth 6)
    return
}

# Acquire
if ([string]::IsNullOrEmpty($GpuUuid)) {
    throw 'Acquire needs -GpuUuid (nvidia-smi --query-gpu=uuid,name --format=csv lists them)'
}
if ([string]::IsNullOrEmpty($ReleaseRoot)) {
    $ReleaseRoot = Get-ActiveReleaseRoot -Root $root
}
$policy = Get-LanePolicy -Root $ReleaseRoot
$gpu = Get-GpuState -Uuid $GpuUuid
if ($gpu.name -cne $policy.gpu_name) {
    throw "GPU $GpuUuid is a '$($gpu.name)', but this lane serves on a '$($policy.gpu_name)'"
}
$driverMajor = 0
if (-not [int]::TryParse(($gpu.driver_version.Split('.')[0]), [ref]$driverMajor) -or $driverMajor -lt $policy.minimum_driver_major) {
    throw "GPU $GpuUuid runs driver $($gpu.driver_version); this lane needs driver branch $($policy.minimum_driver_major) or newer"
}

if ($null -ne $lease) {
    if ([string]$lease.gpu_uuid -ne $GpuUuid) {
        throw "a lease for GPU $($lease.gpu_uuid) is already held; release it first (Control-GpuOwner.ps1 -Action Release)"
    }
    if ($null -ne $lease.serving_power_limit_watts -and [Math]::Abs($gpu.power_limit_watts - [double]$lease.serving_power_limit_watts) -gt 0.5) {
        Set-PowerLimit -Uuid $GpuUuid -Watts ([double]$lease.serving_power_limit_watts)
    }
    Write-Output ((New-StatusObject -Outcome 'already_held' -Uuid $GpuUuid -Lease $lease) | ConvertTo-Json -Depth 6)
    return
}

$limitMib = $policy.foreign_memory_limit_mib
foreach ($process in @(Get-ComputeProcesses -Uuid $GpuUuid)) {
    if ($null -ne $process.used_memory_mib -and $process.used_memory_mib -ge $limitMib) {
        throw "process $($process.pid) ($($process.process_name)) holds $($process.used_memory_mib) MiB of GPU $GpuUuid; the lane refuses to take a GPU another process uses (limit $limitMib MiB)"
    }
}
# On WDDM the driver often cannot attribute memory to processes; then the device
# total decides, measured before the lane's own server exists.
if ($gpu.memory_used_mib -ge $limitMib) {
    throw "GPU $GpuUuid already has $($gpu.memory_used_mib) MiB in use by other processes; the lane refuses to take a GPU another process uses (limit $limitMib MiB)"
}

$servingLimit = $policy.serving_power_limit_watts
if ($null -ne $servingLimit) {
    if ([double]$servingLimit -lt $gpu.power_min_limit_watts -or [double]$servingLimit -gt $gpu.power_max_limit_watts) {
        throw "serving power limit $servingLimit W is outside GPU $GpuUuid's range $(Format-Watts -Watts $gpu.power_min_limit_watts)-$(Format-Watts -Watts $gpu.power_max_limit_watts) W"
    }
}

# Record the owner's state before changing anything, so that Release can always restore it.
$newLease = [ordered]@{
    artifact_type = 'ninfer_gpu_owner_lease'
    schema_version = 1
    gpu_uuid = $GpuUuid
    gpu_name = $gpu.name
    driver_version = $gpu.driver_version
    owner_power_limit_watts = $gpu.power_limit_watts
    serving_power_limit_watts = $servingLimit
    release_root = $ReleaseRoot
    acquired_utc = [DateTime]::UtcNow.ToString('o', $Invariant)
}
Write-TextAtomic -Path $leasePath -Text ($newLease | ConvertTo-Json -Depth 4)
try {
    if ($null -ne $servingLimit) {
        Set-PowerLimit -Uuid $GpuUuid -Watts ([double]$servingLimit)
    }
}
catch {
    $failure = $_
    try {
        Set-PowerLimit -Uuid $GpuUuid -Watts $gpu.power_limit_watts
        Remove-Item -LiteralPath $leasePath -Force
    }
    catch {
        throw "applying the serving power limit failed ($($failure.Exception.Message)) and restoring the owner's $(Format-Watts -Watts $gpu.power_limit_watts) W failed too ($($_.Exception.Message)); the lease file '$leasePath' records the owner's limit"
    }
    throw $failure
}
Write-Output ((New-StatusObject -Outcome 'acquired' -Uuid $GpuUuid -Lease (Read-Lease -Path $leasePath)) | ConvertTo-Json -Depth 6)
