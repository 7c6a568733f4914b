<#
.SYNOPSIS
Creates or verifies the protected state root of one native NInfer lane.

.DESCRIPTION
The state root (for example C:\ProgramData\NInfer\qwen38-4090-native) holds the
immutable release roots, the state pointers, the bearer key, the model file, the
session checkpoints and the GPU-owner lease.  Anyone who can write there can
change what the server runs or read private session state, so the root gets a
protected DACL:

  * inheritance from the parent is disabled (existing inherited entries are dropped);
  * NT AUTHORITY\SYSTEM and BUILTIN\Administrators have Full Control;
  * the service account that runs the server has Modify;
  * nobody else has an entry; the owner is BUILTIN\Administrators.

The script refuses:

  * a path that is not an absolute local drive path (UNC and device paths);
  * a junction, symbolic link or any other reparse point on the path, from the
    drive root down to the state root, and anywhere inside the state root;
  * a NULL DACL (a security descriptor without a DACL grants everyone everything);
  * on verification: inheritance still enabled, an owner other than SYSTEM or
    Administrators, a missing required entry, a Deny entry, or an entry for any
    other principal.

Run it elevated before the first install.  Install-Release.ps1 and
Control-Release.ps1 call it with -VerifyOnly before they change anything.

.PARAMETER StateRoot
Absolute path of the lane's state root, for example C:\ProgramData\NInfer\qwen38-4090-native.

.PARAMETER ServiceAccount
The account the scheduled task runs the server as; it receives Modify.
Default: NT AUTHORITY\LOCAL SERVICE.

.PARAMETER VerifyOnly
Verify the existing root and its ACL; create and change nothing.

.OUTPUTS
One JSON object (ninfer_windows_state_root_protection) describing the verified root.

.EXAMPLE
.\Protect-StateRoot.ps1 -StateRoot C:\ProgramData\NInfer\qwen38-4090-native

.EXAMPLE
.\Protect-StateRoot.ps1 -StateRoot C:\ProgramData\NInfer\qwen38-4090-native -VerifyOnly
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)]
    [ValidateNotNullOrEmpty()]
    [string]$StateRoot,

    [ValidateNotNullOrEmpty()]
    [string]$ServiceAccount = 'NT AUTHORITY\LOCAL SERVICE',

    [switch]$VerifyOnly
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

$SystemSid = New-Object System.Security.Principal.SecurityIdentifier('S-1-5-18')
$AdministratorsSid = New-Object System.Security.Principal.SecurityIdentifier('S-1-5-32-544')

function Resolve-LocalAbsolutePath {
    param([Parameter(Mandatory = $true)][string]$Path)
    $resolved = $ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Path)
    $full = [System.IO.Path]::GetFullPath($resolved)
    if ($full -notmatch '^[A-Za-z]:\\') {
        throw "state root must be an absolute path on a local drive (found '$Path'); UNC and device paths are refused"
    }
    if ($full.Length -gt 3) {
        $full = $full.TrimEnd('\')
    }
    if ($full.Length -le 3) {
        throw "state root must not be a drive root (found '$full')"
    }
    return $full
}

function Test-ReparsePoint {
    param([Parameter(Mandatory = $true)][string]$Path)
    $attributes = [System.IO.File]::GetAttributes($Path)
    return (($attributes -band [System.IO.FileAttributes]::ReparsePoint) -ne 0)
}

function Assert-NoReparsePointOnPath {
    param([Parameter(Mandatory = $true)][string]$Path)
    $current = $Path
    while (-not [string]::IsNullOrEmpty($current)) {
        if (Test-Path -LiteralPath $current) {
            if (Test-ReparsePoint -Path $current) {
                throw "refusing '$Path': '$current' is a junction, symbolic link or other reparse point"
            }
        }
        $parent = [System.IO.Path]::GetDirectoryName($current)
        if ([string]::IsNullOrEmpty($parent) -or $parent -eq $current) {
            break
        }
        $current = $parent
    }
}

function Assert-NoReparsePointInside {
    param([Parameter(Mandatory = $true)][string]$Root)
    $pending = New-Object System.Collections.Generic.Stack[string]
    $pending.Push($Root)
    while ($pending.Count -gt 0) {
        $directory = New-Object System.IO.DirectoryInfo($pending.Pop())
        foreach ($entry in $directory.EnumerateFileSystemInfos()) {
            if (($entry.Attributes -band [System.IO.FileAttributes]::ReparsePoint) -ne 0) {
                throw "refusing state root '$Root': '$($entry.FullName)' is a junction, symbolic link or other reparse point"
            }
            if (($entry.Attributes -band [System.IO.FileAttributes]::Directory) -ne 0) {
                $pending.Push($entry.FullName)
            }
        }
    }
}

function Get-ServiceAccountSid {
    param([Parameter(Mandatory = $true)][string]$Account)
    try {
        $account = New-Object System.Security.Principal.NTAccount($Account)
        return $account.Translate([System.Security.Principal.SecurityIdentifier])
    }
    catch {
        throw "service account '$Account' cannot be resolved to a SID: $($_.Exception.Message)"
    }
}

function New-ProtectedDirectorySecurity {
    param([Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier]$ServiceSid)
    $inherit = [System.Security.AccessControl.InheritanceFlags]'ContainerInherit, ObjectInherit'
    $propagation = [System.Security.AccessControl.PropagationFlags]::None
    $allow = [System.Security.AccessControl.AccessControlType]::Allow
    $security = New-Object System.Security.AccessControl.DirectorySecurity
    $security.SetAccessRuleProtection($true, $false)
    $security.SetOwner($AdministratorsSid)
    $full = [System.Security.AccessControl.FileSystemRights]::FullControl
    $modify = [System.Security.AccessControl.FileSystemRights]::Modify
    $security.AddAccessRule((New-Object System.Security.AccessControl.FileSystemAccessRule($SystemSid, $full, $inherit, $propagation, $allow)))
    $security.AddAccessRule((New-Object System.Security.AccessControl.FileSystemAccessRule($AdministratorsSid, $full, $inherit, $propagation, $allow)))
    if (-not ($ServiceSid.Equals($SystemSid) -or $ServiceSid.Equals($AdministratorsSid))) {
        $security.AddAccessRule((New-Object System.Security.AccessControl.FileSystemAccessRule($ServiceSid, $modify, $inherit, $propagation, $allow)))
    }
    return $security
}

function Assert-ProtectedAcl {
    param(
        [Parameter(Mandatory = $true)][string]$Root,
        [Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier]$ServiceSid
    )
    $acl = Get-Acl -LiteralPath $Root
    $descriptor = New-Object System.Security.AccessControl.RawSecurityDescriptor($acl.Sddl)
    $daclPresent = ($descriptor.ControlFlags -band [System.Security.AccessControl.ControlFlags]::DiscretionaryAclPresent) -ne 0
    if ((-not $daclPresent) -or ($null -eq $descriptor.DiscretionaryAcl)) {
        throw "state root '$Root' has a NULL DACL (everyone has full access); run Protect-StateRoot.ps1 without -VerifyOnly as Administrator"
    }
    if (-not $acl.AreAccessRulesProtected) {
        throw "state root '$Root' still inherits permissions from its parent; run Protect-StateRoot.ps1 without -VerifyOnly as Administrator"
    }
    $owner = New-Object System.Security.Principal.SecurityIdentifier($acl.GetOwner([System.Security.Principal.SecurityIdentifier]).Value)
    if (-not ($owner.Equals($SystemSid) -or $owner.Equals($AdministratorsSid))) {
        throw "state root '$Root' is owned by $($owner.Value), not by SYSTEM or Administrators"
    }
    $required = @{}
    $required[$SystemSid.Value] = [System.Security.AccessControl.FileSystemRights]::FullControl
    $required[$AdministratorsSid.Value] = [System.Security.AccessControl.FileSystemRights]::FullControl
    if (-not $required.ContainsKey($ServiceSid.Value)) {
        $required[$ServiceSid.Value] = [System.Security.AccessControl.FileSystemRights]::Modify
    }
    $seen = @{}
    foreach ($rule in @($acl.GetAccessRules($true, $true, [System.Security.Principal.SecurityIdentifier]))) {
        $sid = $rule.IdentityReference.Value
        if ($rule.AccessControlType -ne [System.Security.AccessControl.AccessControlType]::Allow) {
            throw "state root '$Root' has a Deny entry for $sid; the protected ACL has Allow entries only"
        }
        if ($rule.IsInherited) {
            throw "state root '$Root' has an inherited entry for $sid"
        }
        if (-not $required.ContainsKey($sid)) {
            throw "state root '$Root' grants access to $sid; only SYSTEM, Administrators and the service account may have entries"
        }
        $wanted = [int]$required[$sid]
        if ((([int]$rule.FileSystemRights) -band $wanted) -eq $wanted) {
            $seen[$sid] = $true
        }
    }
    foreach ($sid in $required.Keys) {
        if (-not $seen.ContainsKey($sid)) {
            throw "state root '$Root' lacks the required entry for $sid ($($required[$sid]))"
        }
    }
}

$root = Resolve-LocalAbsolutePath -Path $StateRoot
$serviceSid = Get-ServiceAccountSid -Account $ServiceAccount
Assert-NoReparsePointOnPath -Path $root

if ($VerifyOnly) {
    if (-not (Test-Path -LiteralPath $root -PathType Container)) {
        throw "state root '$root' does not exist; run Protect-StateRoot.ps1 without -VerifyOnly as Administrator"
    }
}
else {
    # Create missing directories one level at a time so that each new level is checked.
    $missing = New-Object System.Collections.Generic.Stack[string]
    $cursor = $root
    while (-not (Test-Path -LiteralPath $cursor)) {
        $missing.Push($cursor)
        $cursor = [System.IO.Path]::GetDirectoryName($cursor)
    }
    while ($missing.Count -gt 0) {
        $next = $missing.Pop()
        [void][System.IO.Directory]::CreateDirectory($next)
        Assert-NoReparsePointOnPath -Path $next
    }
    if (-not (Test-Path -LiteralPath $root -PathType Container)) {
        throw "state root '$root' exists but is not a directory"
    }
    $security = New-ProtectedDirectorySecurity -ServiceSid $serviceSid
    $directory = New-Object System.IO.DirectoryInfo($root)
    $directory.SetAccessControl($security)
}

Assert-NoReparsePointOnPath -Path $root
Assert-NoReparsePointInside -Root $root
Assert-ProtectedAcl -Root $root -ServiceSid $serviceSid

$result = [ordered]@{
    artifact_type = 'ninfer_windows_state_root_protection'
    schema_version = 1
    state_root = $root
    mode = $(if ($VerifyOnly) { 'verified' } else { 'protected' })
    inheritance = 'disabled'
    owner = $AdministratorsSid.Value
    full_control = @($SystemSid.Value, $AdministratorsSid.Value)
    modify = $serviceSid.Value
    reparse_points = 0
    null_dacl = $false
}
Write-Output ($result | ConvertTo-Json -Depth 4)
