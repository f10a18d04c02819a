# Windows counterpart of tools/build_hiredis.sh: a static hiredis (hiredis.lib, /MD) from the pinned,
# checksummed release into $env:HIREDIS_PREFIX, with CMake and MSVC.
#
# cibuildwheel's before-all on the Windows runner (pyproject.toml, [tool.cibuildwheel.windows]):
#   before-all = "powershell -NoProfile -ExecutionPolicy Bypass -File {project}/tools/build_hiredis.ps1"
# Not run on this project's own machines (Linux): the first windows-latest run of wheels.yml is its
# test. tools/windows_cross_check.sh builds the same hiredis with CMake and MinGW-w64 (docs/internals/wheels.md).
# Same variables as build_hiredis.sh: HIREDIS_PREFIX (required), HIREDIS_VERSION, HIREDIS_SHA256,
# HIREDIS_URL, HIREDIS_SOURCE (a local .tar.gz, checked against the same sha256).
$ErrorActionPreference = "Stop"

$PinnedVersion = "1.2.0"
$PinnedSha256 = "82ad632d31ee05da13b537c124f819eb88e18851d9cb0c30ae0552084811588c"

function Fail($message) { Write-Error "build_hiredis.ps1: error: $message"; exit 1 }
function Run($exe) {
    # Windows PowerShell 5.1 can turn a native program's stderr (CMake's warnings) into an error
    # record, which "Stop" makes fatal: judge the program by its exit code only.
    $saved = $ErrorActionPreference
    $ErrorActionPreference = "Continue"
    try { & $exe @args } finally { $ErrorActionPreference = $saved }
    if ($LASTEXITCODE -ne 0) { Fail "$exe $args failed ($LASTEXITCODE)" }
}

$Prefix = $env:HIREDIS_PREFIX
if (-not $Prefix) { Fail "set HIREDIS_PREFIX to the directory to install into" }
New-Item -ItemType Directory -Force -Path $Prefix | Out-Null
$Prefix = (Resolve-Path $Prefix).Path

$Version = $PinnedVersion
$Sha256 = $PinnedSha256
if ($env:HIREDIS_VERSION -and $env:HIREDIS_VERSION -ne $PinnedVersion) {
    $Version = $env:HIREDIS_VERSION
    if (-not $env:HIREDIS_SHA256) { Fail "HIREDIS_VERSION=$Version is not the pinned $PinnedVersion: set HIREDIS_SHA256 too" }
}
if ($env:HIREDIS_SHA256) { $Sha256 = $env:HIREDIS_SHA256.ToLower() }
$Url = if ($env:HIREDIS_URL) { $env:HIREDIS_URL } else { "https://github.com/redis/hiredis/archive/refs/tags/v$Version.tar.gz" }

$Work = Join-Path ([System.IO.Path]::GetTempPath()) ("hiredis-build-" + [guid]::NewGuid().ToString("N"))
New-Item -ItemType Directory -Path $Work | Out-Null
try {
    $Tarball = Join-Path $Work "hiredis.tar.gz"
    if ($env:HIREDIS_SOURCE) {
        Copy-Item $env:HIREDIS_SOURCE $Tarball
        $Origin = $env:HIREDIS_SOURCE
    } else {
        Write-Host "build_hiredis.ps1: downloading $Url"
        Invoke-WebRequest -Uri $Url -OutFile $Tarball -UseBasicParsing
        $Origin = $Url
    }
    $Got = (Get-FileHash -Algorithm SHA256 -Path $Tarball).Hash.ToLower()
    if ($Got -ne $Sha256) { Fail "sha256 mismatch for ${Origin}: expected $Sha256, got $Got" }
    Write-Host "build_hiredis.ps1: sha256 OK ($Sha256) for $Origin"

    $Extracted = Join-Path $Work "src"
    New-Item -ItemType Directory -Path $Extracted | Out-Null
    Run tar -xzf $Tarball -C $Extracted   # bsdtar, shipped with Windows 10 and later
    $Src = (Get-ChildItem -Path $Extracted -Recurse -Filter CMakeLists.txt |
        Where-Object { Test-Path (Join-Path $_.DirectoryName "hiredis.c") } |
        Sort-Object { $_.FullName.Length } | Select-Object -First 1).DirectoryName
    if (-not $Src) { Fail "no hiredis sources (CMakeLists.txt next to hiredis.c) in $Origin" }

    $Header = Get-Content (Join-Path $Src "hiredis.h")
    $Found = (("MAJOR", "MINOR", "PATCH") | ForEach-Object {
        $name = $_
        ($Header | Where-Object { $_ -match "^#define HIREDIS_$name (\d+)" } | Select-Object -First 1) -replace "^#define HIREDIS_$name ", ""
    }) -join "."
    if ($Found -ne $Version) { Fail "the tarball holds hiredis $Found, expected $Version" }

    # Compared without line endings: a git checkout on Windows may have CRLF in LICENSE-hiredis.
    $License = Join-Path $PSScriptRoot "..\LICENSE-hiredis"
    if (Test-Path $License) {
        $Ours = (Get-Content -Raw $License) -replace "`r`n", "`n"
        $Theirs = (Get-Content -Raw (Join-Path $Src "COPYING")) -replace "`r`n", "`n"
        if ($Ours -ne $Theirs) { Fail "hiredis $Found's COPYING differs from LICENSE-hiredis: update LICENSE-hiredis" }
    }

    $Build = Join-Path $Work "build"
    # CMAKE_POLICY_VERSION_MINIMUM: hiredis 1.2.0 asks for CMake 3.0, which CMake 4 refuses.
    Run cmake -S $Src -B $Build -A x64 -DBUILD_SHARED_LIBS=OFF -DENABLE_SSL=OFF -DDISABLE_TESTS=ON `
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "-DCMAKE_INSTALL_PREFIX=$Prefix"
    Run cmake --build $Build --config Release
    Run cmake --install $Build --config Release

    $LicenseDir = Join-Path $Prefix "share\licenses\hiredis"
    New-Item -ItemType Directory -Force -Path $LicenseDir | Out-Null
    Copy-Item (Join-Path $Src "COPYING") (Join-Path $LicenseDir "COPYING")
    if (-not (Test-Path (Join-Path $Prefix "lib\hiredis.lib"))) { Fail "no $Prefix\lib\hiredis.lib after the install" }
    "hiredis $Found`nsource: $Origin sha256:$Sha256`n" | Set-Content (Join-Path $Prefix "share\hiredlock-hiredis.txt")
    Write-Host "build_hiredis.ps1: installed static hiredis $Found into $Prefix"
} finally {
    Remove-Item -Recurse -Force $Work -ErrorAction SilentlyContinue
}
