<#
.SYNOPSIS
Installs, rolls back or repairs a native NInfer lane release (RTX 4090 / RTX 3090, Windows 11).

.DESCRIPTION
Install (default) takes the component release's outer asset directory (the
closed asset set with its SHA256SUMS) and:

  1. verifies the state root: an absolute local path without junctions or other
     reparse points, protected by Protect-StateRoot.ps1 (checked with -VerifyOnly);
  2. reads SHA256SUMS strictly (lines '<64 lowercase hex>  <file name>', LF, no CR,
     no BOM, names sorted ordinally, no duplicates), optionally checks the file's
     own SHA-256 (-ExpectedChecksumsHash), and verifies with Get-FileHash the
     package tarball, the four lifecycle scripts and every other listed asset that
     is present;
  3. lists the tarball with the system tar.exe and refuses absolute paths, '..',
     drive letters, backslashes, alternate data streams, reserved device names,
     names that differ only by case, and any member that is not a regular file or
     a directory (links included);
  4. extracts into a fresh staging folder beside the release roots, verifies the
     payload against its inner SHA256SUMS.txt as a closed set, checks that the
     packaged server-config.json has the SHA-256 given in -ExpectedConfigHash
     (the configuration identity) and, when the outer SHA256SUMS also lists a
     server-config.json, the SHA-256 listed there; that it keeps the serving contract (loopback
     listener, bearer authentication with keys of at least 32 bytes, checkpoint
     origin authentication), that release-spec.json binds the same lane and model,
     and that the packaged lifecycle scripts are the verified outer ones;
  5. publishes the payload by renaming it to <StateRoot>\releases\<release-id>
     (the release id is the deployment profile).  An existing release root is never
     overwritten: identical bytes are reused, different bytes are refused;
  6. writes the state pointers atomically (temporary file + File.Replace):
     prepared_release first, then previous_release (the release that was active),
     and active_release last; prepared_release is removed when the switch is done.

-Rollback switches active_release back to previous_release (and remembers the
release it leaves as the new previous_release).  The first release of a lineage
has no previous_release and cannot be rolled back.

-RepairInterruptedInstall finishes or abandons a switch that was interrupted
(a prepared_release pointer is left): a prepared release whose root verifies is
made active; otherwise the pointer is dropped and the active release kept.  Stale
staging folders are removed.

Nothing is done while the lane's server runs; stop it first with
Control-Release.ps1 -Action Stop.

State root layout:
  releases\<release-id>\       immutable payload of one package
  state\prepared_release, state\active_release, state\previous_release
  state\installed\<release-id>.json   install record (package and payload hashes)
  state\lane                    the lane this root belongs to
  secrets\api-key               bearer key (64 hex characters, generated when missing)
  models\                       the pinned model file (downloaded separately)
  cache\<release-instance-id>\  session checkpoints of one installed release

.PARAMETER AssetDirectory
Folder holding the downloaded outer asset set and its SHA256SUMS.

.PARAMETER PackageName
File name of the package tarball as listed in SHA256SUMS.

.PARAMETER ExpectedConfigHash
SHA-256 of the packaged server-config.json as recorded by the product manifest
(configuration_sha256).

.PARAMETER ExpectedChecksumsHash
Optional SHA-256 of the SHA256SUMS file itself (checksums_sha256).

.PARAMETER StateRoot
The lane's protected state root, e.g. C:\ProgramData\NInfer\qwen38-4090-native.

.PARAMETER ServiceAccount
The account the state root was protected for (see Protect-StateRoot.ps1).

.PARAMETER Rollback
Switch the active release back to previous_release.

.PARAMETER RepairInterruptedInstall
Finish or abandon an interrupted switch.

.OUTPUTS
One JSON object (ninfer_windows_install_result).

.EXAMPLE
.\Install-Release.ps1 -AssetDirectory .\assets -PackageName ninfer-rtx4090-native-v0.7.0-beta.2-windows-x86_64-cuda13.3-rtx4090.tar.gz -ExpectedConfigHash <sha256> -StateRoot C:\ProgramData\NInfer\qwen38-4090-native

.EXAMPLE
.\Install-Release.ps1 -Rollback -StateRoot C:\ProgramData\NInfer\qwen38-4090-native
#>
[CmdletBinding(DefaultParameterSetName = 'Install')]
param(
    [Parameter(Mandatory = $true, ParameterSetName = 'Install')]
    [ValidateNotNullOrEmpty()]
    [string]$AssetDirectory,

    [Parameter(Mandatory = $true, ParameterSetName = 'Install')]
    [ValidatePattern('^[A-Za-z0-9][A-Za-z0-9._+-]*\.tar\.gz$')]
    [string]$PackageName,

    [Parameter(Mandatory = $true, ParameterSetName = 'Install')]
    [ValidatePattern('^[0-9a-f]{64}$')]
    [string]$ExpectedConfigHash,

    [Parameter(ParameterSetName = 'Install')]
    [ValidatePattern('^[0-9a-f]{64}$')]
    [string]$ExpectedChecksumsHash,

    [Parameter(Mandatory = $true)]
    [ValidateNotNullOrEmpty()]
    [string]$StateRoot,

    [ValidateNotNullOrEmpty()]
    [string]$ServiceAccount = 'NT AUTHORITY\LOCAL SERVICE',

    [Parameter(Mandatory = $true, ParameterSetName = 'Rollback')]
    [switch]$Rollback,

    [Parameter(Mandatory = $true, ParameterSetName = 'Repair')]
    [switch]$RepairInterruptedInstall
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

$Invariant = [System.Globalization.CultureInfo]::InvariantCulture
$Utf8Strict = New-Object System.Text.UTF8Encoding($false, $true)
$Utf8NoBom = New-Object System.Text.UTF8Encoding($false)
$ReleaseIdPattern = '^[a-z0-9][a-z0-9.-]{0,127}$'
$Sha256Pattern = '^[0-9a-f]{64}$'
$OuterNamePattern = '^[A-Za-z0-9][A-Za-z0-9._+-]*$'
$SegmentPattern = '^[A-Za-z0-9_+-][A-Za-z0-9._+-]*$'
$ReservedNamePattern = '^(?i:CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?$'
$LifecycleScripts = @('Control-GpuOwner.ps1', 'Control-Release.ps1', 'Install-Release.ps1', 'Protect-StateRoot.ps1')
$RequiredPayload = @('bin/ninfer-serve.exe', 'build-identity.json', 'release-spec.json', 'server-config.json') + $LifecycleScripts
$InnerChecksums = 'SHA256SUMS.txt'

function Resolve-LocalPath {
    param([Parameter(Mandatory = $true)][string]$Path, [Parameter(Mandatory = $true)][string]$What)
    $full = [System.IO.Path]::GetFullPath($ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Path))
    if ($full -notmatch '^[A-Za-z]:\\') {
        throw "$What must be an absolute local drive path (found '$Path'); UNC and device paths are refused"
    }
    if ($full.Length -gt 3) {
        $full = $full.TrimEnd('\')
    }
    return $full
}

function Assert-NoReparsePointOnPath {
    param([Parameter(Mandatory = $true)][string]$Path)
    $cursor = $Path
    while (-not [string]::IsNullOrEmpty($cursor)) {
        if (Test-Path -LiteralPath $cursor) {
            if (([System.IO.File]::GetAttributes($cursor) -band [System.IO.FileAttributes]::ReparsePoint) -ne 0) {
                throw "refusing '$Path': '$cursor' is a junction, symbolic link or other reparse point"
            }
        }
        $parent = [System.IO.Path]::GetDirectoryName($cursor)
        if ([string]::IsNullOrEmpty($parent) -or $parent -eq $cursor) { break }
        $cursor = $parent
    }
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
    $bytes = [System.IO.File]::ReadAllBytes($Path)
    if ($bytes.Length -ge 3 -and $bytes[0] -eq 0xEF -and $bytes[1] -eq 0xBB -and $bytes[2] -eq 0xBF) {
        throw "'$Path' starts with a byte-order mark; the release files are UTF-8 without BOM"
    }
    if ([Array]::IndexOf($bytes, [byte]13) -ge 0) {
        throw "'$Path' contains a carriage return; the release files use LF line endings"
    }
    return (ConvertFrom-Json -InputObject $Utf8Strict.GetString($bytes))
}

function Write-TextAtomic {
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][AllowEmptyString()][string]$Text
    )
    $directory = [System.IO.Path]::GetDirectoryName($Path)
    $temporary = Join-Path $directory ('.' + [System.IO.Path]::GetFileName($Path) + '.' + [guid]::NewGuid().ToString('N') + '.tmp')
    $bytes = $Utf8NoBom.GetBytes($Text)
    $stream = New-Object System.IO.FileStream($temporary, [System.IO.FileMode]::CreateNew, [System.IO.FileAccess]::Write, [System.IO.FileShare]::None)
    try {
        $stream.Write($bytes, 0, $bytes.Length)
        $stream.Flush($true)
    }
    finally {
        $stream.Dispose()
    }
    try {
        if (Test-Path -LiteralPath $Path -PathType Leaf) {
            [System.IO.File]::Replace($temporary, $Path, [System.Management.Automation.Language.NullString]::Value)
        }
        else {
            [System.IO.File]::Move($temporary, $Path)
        }
    }
    catch {
        Remove-Item -LiteralPath $temporary -Force -ErrorAction SilentlyContinue
        throw
    }
}

function Read-StatePointer {
    param([Parameter(Mandatory = $true)][string]$Name)
    $path = Join-Path $script:StateDirectory $Name
    if (-not (Test-Path -LiteralPath $path -PathType Leaf)) {
        return $null
    }
    $text = [System.IO.File]::ReadAllText($path, $Utf8Strict)
    if (-not $text.EndsWith("`n")) {
        throw "state pointer '$path' is incomplete (no final LF); run Install-Release.ps1 -RepairInterruptedInstall"
    }
    $value = $text.Substring(0, $text.Length - 1)
    if ($value -cnotmatch $ReleaseIdPattern) {
        throw "state pointer '$path' does not hold a release id"
    }
    return $value
}

function Write-StatePointer {
    param([Parameter(Mandatory = $true)][string]$Name, [Parameter(Mandatory = $true)][string]$ReleaseId)
    if ($ReleaseId -cnotmatch $ReleaseIdPattern) {
        throw "refusing to write '$ReleaseId' into state pointer $Name"
    }
    Write-TextAtomic -Path (Join-Path $script:StateDirectory $Name) -Text ($ReleaseId + "`n")
}

function Remove-StatePointer {
    param([Parameter(Mandatory = $true)][string]$Name)
    $path = Join-Path $script:StateDirectory $Name
    if (Test-Path -LiteralPath $path -PathType Leaf) {
        Remove-Item -LiteralPath $path -Force
    }
}

function Read-ChecksumFile {
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][bool]$Outer
    )
    $bytes = [System.IO.File]::ReadAllBytes($Path)
    if ($bytes.Length -eq 0) {
        throw "checksum file '$Path' is empty"
    }
    if ($bytes.Length -ge 3 -and $bytes[0] -eq 0xEF -and $bytes[1] -eq 0xBB -and $bytes[2] -eq 0xBF) {
        throw "checksum file '$Path' starts with a byte-order mark"
    }
    if ([Array]::IndexOf($bytes, [byte]13) -ge 0) {
        throw "checksum file '$Path' contains a carriage return (CRLF); the format is LF only"
    }
    if ($bytes[$bytes.Length - 1] -ne 10) {
        throw "checksum file '$Path' does not end with a line feed"
    }
    $text = $Utf8Strict.GetString($bytes, 0, $bytes.Length - 1)
    $entries = New-Object 'System.Collections.Generic.Dictionary[string,string]' ([System.StringComparer]::Ordinal)
    $folded = New-Object 'System.Collections.Generic.HashSet[string]' ([System.StringComparer]::OrdinalIgnoreCase)
    $previous = $null
    $number = 0
    foreach ($line in $text.Split("`n")) {
        $number++
        if ($line -cnotmatch '^([0-9a-f]{64})  (\S.*)$') {
            throw "checksum file '$Path' line ${number} is not '<64 lowercase hex>  <name>'"
        }
        $hash = $Matches[1]
        $name = $Matches[2]
        if ($Outer) {
            if ($name -cnotmatch $OuterNamePattern) {
                throw "checksum file '$Path' line ${number} names '$name'; outer entries are bare file names"
            }
            if ($null -ne $previous -and [string]::CompareOrdinal($previous, $name) -ge 0) {
                throw "checksum file '$Path' line ${number}: '$name' is out of ordinal order"
            }
            $previous = $name
        }
        else {
            Assert-RelativeMemberPath -Name $name -Where "checksum file '$Path' line $number"
        }
        if (-not $folded.Add($name)) {
            throw "checksum file '$Path' lists '$name' twice (names are compared ignoring case on NTFS)"
        }
        $entries[$name] = $hash
    }
    return $entries
}

function Assert-RelativeMemberPath {
    param([Parameter(Mandatory = $true)][string]$Name, [Parameter(Mandatory = $true)][string]$Where)
    if ($Name.Length -eq 0 -or $Name.Length -gt 200) {
        throw "$Where has an empty or overlong path"
    }
    foreach ($segment in $Name.Split('/')) {
        if ($segment -cnotmatch $SegmentPattern -or $segment.EndsWith('.') -or $segment -match $ReservedNamePattern) {
            throw "$Where has the unsafe path '$Name' (absolute paths, '..', drive letters, backslashes, ':' streams and device names are refused)"
        }
    }
}

function Get-TarPath {
    $tar = Join-Path ([Environment]::GetFolderPath('System')) 'tar.exe'
    if (-not (Test-Path -LiteralPath $tar -PathType Leaf)) {
        throw "the system tar.exe ('$tar', Windows 10 1803 or newer) is missing"
    }
    return $tar
}

function Invoke-Tar {
    param([Parameter(Mandatory = $true)][string[]]$Arguments)
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $all = @(& (Get-TarPath) @Arguments 2>&1)
        $code = $LASTEXITCODE
    }
    finally {
        $ErrorActionPreference = $previous
    }
    $stdout = @($all | Where-Object { $_ -isnot [System.Management.Automation.ErrorRecord] } | ForEach-Object { [string]$_ })
    $stderr = @($all | Where-Object { $_ -is [System.Management.Automation.ErrorRecord] } | ForEach-Object { [string]$_ })
    if ($code -ne 0) {
        throw "tar.exe $($Arguments[0]) failed with exit code ${code}: $(($stderr | Select-Object -First 5) -join ' ')"
    }
    return $stdout
}

function Assert-TarMembers {
    param([Parameter(Mandatory = $true)][string]$Package)
    $names = @(Invoke-Tar -Arguments @('-t', '-z', '-f', $Package))
    $verbose = @(Invoke-Tar -Arguments @('-t', '-v', '-z', '-f', $Package))
    if ($names.Count -eq 0 -or $names.Count -ne $verbose.Count) {
        throw "package '$Package' has an unreadable member list"
    }
    $folded = New-Object 'System.Collections.Generic.HashSet[string]' ([System.StringComparer]::OrdinalIgnoreCase)
    for ($index = 0; $index -lt $names.Count; $index++) {
        $name = $names[$index]
        $kind = $verbose[$index].Substring(0, 1)
        if ($kind -cne '-' -and $kind -cne 'd') {
            throw "package member '$name' is not a regular file or directory (type '$kind'); links are refused"
        }
        $relative = $name
        if ($relative.StartsWith('./')) {
            $relative = $relative.Substring(2)
        }
        $relative = $relative.TrimEnd('/')
        if ($relative.Length -eq 0 -and $kind -ceq 'd') {
            continue
        }
        Assert-RelativeMemberPath -Name $relative -Where "package member"
        if (-not $folded.Add($relative)) {
            throw "package lists '$relative' twice (names are compared ignoring case on NTFS)"
        }
    }
}

function Get-PayloadFiles {
    param([Parameter(Mandatory = $true)][string]$Root)
    $files = New-Object 'System.Collections.Generic.List[string]'
    $pending = New-Object System.Collections.Generic.Stack[string]
    $pending.Push($Root)
    $prefixLength = $Root.Length + 1
    while ($pending.Count -gt 0) {
        $directory = New-Object System.IO.DirectoryInfo($pending.Pop())
        foreach ($entry in $directory.EnumerateFileSystemInfos()) {
            if (($entry.Attributes -band [System.IO.FileAttributes]::ReparsePoint) -ne 0) {
                throw "'$($entry.FullName)' is a reparse point; release roots hold plain files only"
            }
            if (($entry.Attributes -band [System.IO.FileAttributes]::Directory) -ne 0) {
                $pending.Push($entry.FullName)
            }
            else {
                $files.Add($entry.FullName.Substring($prefixLength).Replace('\', '/'))
            }
        }
    }
    return $files.ToArray()
}

function Assert-Payload {
    param([Parameter(Mandatory = $true)][string]$Root)
    $sumsPath = Join-Path $Root $InnerChecksums
    if (-not (Test-Path -LiteralPath $sumsPath -PathType Leaf)) {
        throw "payload '$Root' has no $InnerChecksums"
    }
    $entries = Read-ChecksumFile -Path $sumsPath -Outer $false
    $present = New-Object 'System.Collections.Generic.HashSet[string]' ([System.StringComparer]::Ordinal)
    foreach ($file in @(Get-PayloadFiles -Root $Root)) {
        if ($file -ceq $InnerChecksums) { continue }
        [void]$present.Add($file)
        if (-not $entries.ContainsKey($file)) {
            throw "payload file '$file' is not listed in $InnerChecksums (the payload is a closed set)"
        }
    }
    foreach ($name in $entries.Keys) {
        if (-not $present.Contains($name)) {
            throw "payload file '$name' listed in $InnerChecksums is missing"
        }
        $actual = Get-Sha256 -Path (Join-Path $Root ($name.Replace('/', '\')))
        if ($actual -cne $entries[$name]) {
            throw "payload file '$name' has SHA-256 $actual; $InnerChecksums records $($entries[$name])"
        }
    }
    foreach ($required in $RequiredPayload) {
        if (-not $entries.ContainsKey($required)) {
            throw "payload lacks the required member '$required'"
        }
    }
    return $entries
}

function Assert-ServingContract {
    param([Parameter(Mandatory = $true)][object]$Config, [Parameter(Mandatory = $true)][object]$Spec)
    if ((Get-Field $Config 'artifact_type' 'server-config.json') -cne 'ninfer_windows_server_config' -or [int](Get-Field $Config 'schema_version' 'server-config.json') -ne 4) {
        throw 'server-config.json is not a ninfer_windows_server_config of schema 4'
    }
    if ((Get-Field $Spec 'artifact_type' 'release-spec.json') -cne 'ninfer_windows_release_spec' -or [int](Get-Field $Spec 'schema_version' 'release-spec.json') -ne 3) {
        throw 'release-spec.json is not a ninfer_windows_release_spec of schema 3'
    }
    $lane = [string](Get-Field $Config 'lane' 'server-config.json')
    if ($lane -cne [string](Get-Field $Spec 'lane' 'release-spec.json')) {
        throw "server-config.json serves lane '$lane' but release-spec.json describes '$($Spec.lane)'"
    }
    $listen = Get-Field $Config 'listen' 'server-config.json'
    $listenHost = [string](Get-Field $listen 'host' 'server-config.json listen')
    if ($listenHost -cne '127.0.0.1' -and $listenHost -cne '::1') {
        throw "server-config.json listen.host is '$listenHost'; the native lanes listen on loopback only"
    }
    $auth = Get-Field $Config 'auth' 'server-config.json'
    if ((Get-Field $auth 'required' 'server-config.json auth') -ne $true -or (Get-Field $auth 'scheme' 'server-config.json auth') -cne 'bearer' -or [int](Get-Field $auth 'minimum_key_bytes' 'server-config.json auth') -lt 32) {
        throw 'server-config.json does not require bearer authentication with keys of at least 32 bytes'
    }
    $checkpoint = Get-Field $Config 'session_checkpoint' 'server-config.json'
    if ((Get-Field $checkpoint 'require_origin_auth' 'server-config.json session_checkpoint') -ne $true) {
        throw 'server-config.json does not require session-checkpoint origin authentication'
    }
    $configModel = Get-Field $Config 'model' 'server-config.json'
    $specModel = Get-Field $Spec 'model' 'release-spec.json'
    foreach ($key in @('public_id', 'repository', 'revision', 'artifact_name', 'artifact_url', 'artifact_bytes', 'artifact_sha256', 'local_file_name', 'container_version')) {
        $left = [string](Get-Field $configModel $key 'server-config.json model')
        $right = [string](Get-Field $specModel $key 'release-spec.json model')
        if ($left -cne $right) {
            throw "model.$key differs between server-config.json ('$left') and release-spec.json ('$right')"
        }
    }
    if ([string]$configModel.artifact_sha256 -cnotmatch $Sha256Pattern) {
        throw 'server-config.json model.artifact_sha256 is not 64 lowercase hex digits'
    }
}

function Test-ServerRunning {
    $runtimePath = Join-Path $script:StateDirectory 'runtime.json'
    if (-not (Test-Path -LiteralPath $runtimePath -PathType Leaf)) {
        return $false
    }
    $runtime = Read-JsonDocument -Path $runtimePath
    $process = Get-Process -Id ([int](Get-Field $runtime 'pid' 'runtime.json')) -ErrorAction SilentlyContinue
    if ($null -eq $process) {
        return $false
    }
    return ($process.StartTime.ToUniversalTime().Ticks -eq [long](Get-Field $runtime 'start_time_utc_ticks' 'runtime.json'))
}

function Assert-InstalledRelease {
    param([Parameter(Mandatory = $true)][string]$ReleaseId)
    $recordPath = Join-Path $script:InstalledDirectory ($ReleaseId + '.json')
    if (-not (Test-Path -LiteralPath $recordPath -PathType Leaf)) {
        throw "release '$ReleaseId' has no install record ('$recordPath')"
    }
    $record = Read-JsonDocument -Path $recordPath
    $root = Join-Path $script:ReleasesDirectory $ReleaseId
    if (-not (Test-Path -LiteralPath $root -PathType Container)) {
        throw "release root '$root' is missing"
    }
    [void](Assert-Payload -Root $root)
    $sums = Get-Sha256 -Path (Join-Path $root $InnerChecksums)
    if ($sums -cne [string](Get-Field $record 'inner_checksums_sha256' 'install record')) {
        throw "release root '$root' does not hold the payload its install record names"
    }
    return $record
}

function New-Result {
    param([Parameter(Mandatory = $true)][string]$Outcome, [string]$ReleaseId, [string]$InstanceId)
    return [ordered]@{
        artifact_type = 'ninfer_windows_install_result'
        schema_version = 1
        outcome = $Outcome
        release_id = $(if ([string]::IsNullOrEmpty($ReleaseId)) { $null } else { $ReleaseId })
        release_instance_id = $(if ([string]::IsNullOrEmpty($InstanceId)) { $null } else { $InstanceId })
        active_release = (Read-StatePointer -Name 'active_release')
        previous_release = (Read-StatePointer -Name 'previous_release')
        prepared_release = (Read-StatePointer -Name 'prepared_release')
        state_root = $script:Root
    }
}

function Switch-ActiveRelease {
    param([Parameter(Mandatory = $true)][string]$Target)
    # prepared_release marks the switch as in progress; active_release moves last.
    Write-StatePointer -Name 'prepared_release' -ReleaseId $Target
    $active = Read-StatePointer -Name 'active_release'
    if ($null -ne $active -and $active -cne $Target) {
        Write-StatePointer -Name 'previous_release' -ReleaseId $active
    }
    Write-StatePointer -Name 'active_release' -ReleaseId $Target
    Remove-StatePointer -Name 'prepared_release'
}

function Install-Package {
    $assets = Resolve-LocalPath -Path $AssetDirectory -What 'asset directory'
    $sumsPath = Join-Path $assets 'SHA256SUMS'
    if (-not (Test-Path -LiteralPath $sumsPath -PathType Leaf)) {
        throw "asset directory '$assets' has no SHA256SUMS"
    }
    if (-not [string]::IsNullOrEmpty($ExpectedChecksumsHash)) {
        if ($ExpectedChecksumsHash -cnotmatch $Sha256Pattern) {
            throw '-ExpectedChecksumsHash must be 64 lowercase hex digits'
        }
        $actualSums = Get-Sha256 -Path $sumsPath
        if ($actualSums -cne $ExpectedChecksumsHash) {
            throw "SHA256SUMS has SHA-256 $actualSums; the release records $ExpectedChecksumsHash"
        }
    }
    if ($ExpectedConfigHash -cnotmatch $Sha256Pattern) {
        throw '-ExpectedConfigHash must be 64 lowercase hex digits'
    }
    $outer = Read-ChecksumFile -Path $sumsPath -Outer $true
    foreach ($name in @($PackageName) + $LifecycleScripts) {
        if (-not $outer.ContainsKey($name)) {
            throw "SHA256SUMS does not list '$name'"
        }
        if (-not (Test-Path -LiteralPath (Join-Path $assets $name) -PathType Leaf)) {
            throw "asset '$name' listed in SHA256SUMS is not in '$assets'"
        }
    }
    foreach ($name in $outer.Keys) {
        $path = Join-Path $assets $name
        if (Test-Path -LiteralPath $path -PathType Leaf) {
            $actual = Get-Sha256 -Path $path
            if ($actual -cne $outer[$name]) {
                throw "asset '$name' has SHA-256 $actual; SHA256SUMS records $($outer[$name])"
            }
        }
    }
    $packagePath = Join-Path $assets $PackageName
    $packageSha256 = $outer[$PackageName]
    Assert-TarMembers -Package $packagePath

    $staging = Join-Path $script:ReleasesDirectory ('.staging-' + [guid]::NewGuid().ToString('N'))
    [void][System.IO.Directory]::CreateDirectory($staging)
    try {
        [void](Invoke-Tar -Arguments @('-x', '-z', '-f', $packagePath, '-C', $staging))
        $payload = $staging
        if (-not (Test-Path -LiteralPath (Join-Path $staging $InnerChecksums) -PathType Leaf)) {
            $children = @(Get-ChildItem -LiteralPath $staging -Force)
            if ($children.Count -ne 1 -or -not $children[0].PSIsContainer) {
                throw "package '$PackageName' has no $InnerChecksums at its root or in one top-level folder"
            }
            $payload = $children[0].FullName
        }
        [void](Assert-Payload -Root $payload)
        $configPath = Join-Path $payload 'server-config.json'
        $configSha256 = Get-Sha256 -Path $configPath
        if ($configSha256 -cne $ExpectedConfigHash) {
            throw "packaged server-config.json has SHA-256 $configSha256; the release records $ExpectedConfigHash"
        }
        if ($outer.ContainsKey('server-config.json') -and $outer['server-config.json'] -cne $configSha256) {
            throw "packaged server-config.json has SHA-256 $configSha256; the outer SHA256SUMS lists $($outer['server-config.json'])"
        }
        $config = Read-JsonDocument -Path $configPath
        $spec = Read-JsonDocument -Path (Join-Path $payload 'release-spec.json')
        Assert-ServingContract -Config $config -Spec $spec
        $identity = Read-JsonDocument -Path (Join-Path $payload 'build-identity.json')
        $declared = $identity.PSObject.Properties['configuration_sha256']
        if ($null -ne $declared -and [string]$declared.Value -cne $configSha256) {
            throw "build-identity.json records configuration_sha256 $($declared.Value), but the packaged server-config.json has $configSha256"
        }
        foreach ($name in $LifecycleScripts) {
            $packaged = Get-Sha256 -Path (Join-Path $payload $name)
            if ($packaged -cne $outer[$name]) {
                throw "the packaged $name differs from the verified outer asset"
            }
        }
        $releaseId = [string]$config.deployment_profile
        if ($releaseId -cnotmatch $ReleaseIdPattern) {
            throw "server-config.json deployment_profile '$releaseId' is not a valid release id"
        }
        $lane = [string]$config.lane
        $lanePath = Join-Path $script:StateDirectory 'lane'
        if (Test-Path -LiteralPath $lanePath -PathType Leaf) {
            $rootLane = [System.IO.File]::ReadAllText($lanePath, $Utf8Strict).TrimEnd("`n")
            if ($rootLane -cne $lane) {
                throw "state root '$($script:Root)' belongs to lane '$rootLane'; this package is for '$lane'"
            }
        }
        $instanceId = $releaseId + '-' + $packageSha256.Substring(0, 12)
        $serverSha256 = Get-Sha256 -Path (Join-Path $payload 'bin\ninfer-serve.exe')
        $innerSha256 = Get-Sha256 -Path (Join-Path $payload $InnerChecksums)

        $active = Read-StatePointer -Name 'active_release'
        $releaseRoot = Join-Path $script:ReleasesDirectory $releaseId
        $recordPath = Join-Path $script:InstalledDirectory ($releaseId + '.json')
        if (Test-Path -LiteralPath $recordPath -PathType Leaf) {
            $existing = Read-JsonDocument -Path $recordPath
            if ([string](Get-Field $existing 'package_sha256' 'install record') -cne $packageSha256) {
                throw "release '$releaseId' is already installed from a package with SHA-256 $($existing.package_sha256); a release id is bound to one package and its root is never overwritten"
            }
        }
        if (Test-Path -LiteralPath $releaseRoot) {
            [void](Assert-Payload -Root $releaseRoot)
            if ((Get-Sha256 -Path (Join-Path $releaseRoot $InnerChecksums)) -cne $innerSha256) {
                throw "release root '$releaseRoot' exists with different bytes; refusing to overwrite it"
            }
            $outcome = 'already_installed'
        }
        else {
            [System.IO.Directory]::Move($payload, $releaseRoot)
            $outcome = 'installed'
        }
        Assert-NoReparsePointOnPath -Path $releaseRoot

        if (-not (Test-Path -LiteralPath $lanePath -PathType Leaf)) {
            Write-TextAtomic -Path $lanePath -Text ($lane + "`n")
        }
        $record = [ordered]@{
            artifact_type = 'ninfer_windows_install_record'
            schema_version = 1
            release_id = $releaseId
            release_instance_id = $instanceId
            lane = $lane
            package_name = $PackageName
            package_sha256 = $packageSha256
            inner_checksums_sha256 = $innerSha256
            config_sha256 = $configSha256
            server_binary_sha256 = $serverSha256
            model_artifact_sha256 = [string]$config.model.artifact_sha256
            installed_utc = [DateTime]::UtcNow.ToString('o', $Invariant)
        }
        if (-not (Test-Path -LiteralPath $recordPath -PathType Leaf)) {
            Write-TextAtomic -Path $recordPath -Text (($record | ConvertTo-Json -Depth 4) + "`n")
        }
        else {
            $record = Read-JsonDocument -Path $recordPath
            $instanceId = [string]$record.release_instance_id
        }

        New-ApiKeyIfMissing
        foreach ($directory in @('models', 'cache', 'logs')) {
            [void][System.IO.Directory]::CreateDirectory((Join-Path $script:Root $directory))
        }
        if ($active -ceq $releaseId) {
            return (New-Result -Outcome 'already_active' -ReleaseId $releaseId -InstanceId $instanceId)
        }
        Switch-ActiveRelease -Target $releaseId
        return (New-Result -Outcome $outcome -ReleaseId $releaseId -InstanceId $instanceId)
    }
    finally {
        if (Test-Path -LiteralPath $staging) {
            Remove-Item -LiteralPath $staging -Recurse -Force
        }
    }
}

function New-ApiKeyIfMissing {
    $secrets = Join-Path $script:Root 'secrets'
    [void][System.IO.Directory]::CreateDirectory($secrets)
    $keyPath = Join-Path $secrets 'api-key'
    if (Test-Path -LiteralPath $keyPath -PathType Leaf) {
        return
    }
    # 32 random bytes as 64 lowercase hex characters, no newline.
    $random = New-Object System.Security.Cryptography.RNGCryptoServiceProvider
    $buffer = New-Object byte[] 32
    try {
        $random.GetBytes($buffer)
    }
    finally {
        $random.Dispose()
    }
    $builder = New-Object System.Text.StringBuilder
    foreach ($value in $buffer) {
        [void]$builder.Append($value.ToString('x2', $Invariant))
    }
    $stream = New-Object System.IO.FileStream($keyPath, [System.IO.FileMode]::CreateNew, [System.IO.FileAccess]::Write, [System.IO.FileShare]::None)
    try {
        $bytes = [System.Text.Encoding]::ASCII.GetBytes($builder.ToString())
        $stream.Write($bytes, 0, $bytes.Length)
        $stream.Flush($true)
    }
    finally {
        $stream.Dispose()
        [void]$builder.Clear()
    }
    Write-Verbose "generated a bearer key in '$keyPath' (its value is not shown)"
}

function Invoke-Rollback {
    if ($null -ne (Read-StatePointer -Name 'prepared_release')) {
        throw 'an interrupted switch is pending; run Install-Release.ps1 -RepairInterruptedInstall first'
    }
    $active = Read-StatePointer -Name 'active_release'
    $previous = Read-StatePointer -Name 'previous_release'
    if ($null -eq $previous) {
        throw 'there is no previous_release to roll back to (the first release of a lineage has no predecessor)'
    }
    if ($previous -ceq $active) {
        throw "previous_release and active_release both name '$active'; nothing to roll back to"
    }
    $record = Assert-InstalledRelease -ReleaseId $previous
    Switch-ActiveRelease -Target $previous
    return (New-Result -Outcome 'rolled_back' -ReleaseId $previous -InstanceId ([string]$record.release_instance_id))
}

function Invoke-Repair {
    foreach ($stale in @(Get-ChildItem -LiteralPath $script:ReleasesDirectory -Force -Directory -Filter '.staging-*')) {
        Remove-Item -LiteralPath $stale.FullName -Recurse -Force
    }
    foreach ($stale in @(Get-ChildItem -LiteralPath $script:StateDirectory -Force -File -Filter '.*.tmp')) {
        Remove-Item -LiteralPath $stale.FullName -Force
    }
    $prepared = Read-StatePointer -Name 'prepared_release'
    if ($null -eq $prepared) {
        return (New-Result -Outcome 'nothing_to_repair')
    }
    $record = $null
    try {
        $record = Assert-InstalledRelease -ReleaseId $prepared
    }
    catch {
        Write-Warning "prepared release '$prepared' does not verify ($($_.Exception.Message)); keeping the active release"
        Remove-StatePointer -Name 'prepared_release'
        return (New-Result -Outcome 'abandoned_prepared_release' -ReleaseId $prepared)
    }
    Switch-ActiveRelease -Target $prepared
    return (New-Result -Outcome 'repaired' -ReleaseId $prepared -InstanceId ([string]$record.release_instance_id))
}

$script:Root = Resolve-LocalPath -Path $StateRoot -What 'state root'
Assert-NoReparsePointOnPath -Path $script:Root
if (-not (Test-Path -LiteralPath $script:Root -PathType Container)) {
    throw "state root '$($script:Root)' does not exist; create it with Protect-StateRoot.ps1 (elevated)"
}
if ($PSCmdlet.ParameterSetName -eq 'Install') {
    $protector = Join-Path (Resolve-LocalPath -Path $AssetDirectory -What 'asset directory') 'Protect-StateRoot.ps1'
}
else {
    $protector = Join-Path $PSScriptRoot 'Protect-StateRoot.ps1'
}
[void](& $protector -StateRoot $script:Root -ServiceAccount $ServiceAccount -VerifyOnly)

$script:StateDirectory = Join-Path $script:Root 'state'
$script:ReleasesDirectory = Join-Path $script:Root 'releases'
$script:InstalledDirectory = Join-Path $script:StateDirectory 'installed'
foreach ($directory in @($script:StateDirectory, $script:ReleasesDirectory, $script:InstalledDirectory)) {
    [void][System.IO.Directory]::CreateDirectory($directory)
    Assert-NoReparsePointOnPath -Path $directory
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
    if (Test-ServerRunning) {
        throw 'the lane server is running; stop it first with Control-Release.ps1 -Action Stop'
    }
    switch ($PSCmdlet.ParameterSetName) {
        'Install' {
            if ($null -ne (Read-StatePointer -Name 'prepared_release')) {
                throw 'an interrupted install left state\prepared_release; run Install-Release.ps1 -RepairInterruptedInstall first'
            }
            $result = Install-Package
        }
        'Rollback' { $result = Invoke-Rollback }
        'Repair' { $result = Invoke-Repair }
    }
}
finally {
    $lock.Dispose()
}
Write-Output ($result | ConvertTo-Json -Depth 4)
