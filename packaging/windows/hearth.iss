; Inno Setup script: wraps dist\Hearth\ (built by `python packaging\build.py` on Windows) into
; dist\Hearth-<version>-windows-setup.exe.
;
; UNTESTED: written and reviewed on Linux; no Windows machine has compiled or run it yet.
;
;   pip install -e ".[package]"
;   python packaging\build.py --no-archive
;   "C:\Program Files (x86)\Inno Setup 6\ISCC.exe" /DAppVersion=0.1.0 packaging\windows\hearth.iss
;
; AppVersion must match app\__init__.py's __version__ (build.py prints it). The installer is per user by
; default (no administrator prompt; {autopf} is then %LOCALAPPDATA%\Programs); the user may choose an
; install for all users on the first page.

#ifndef AppVersion
  #error Pass the version: ISCC /DAppVersion=0.1.0 packaging\windows\hearth.iss
#endif

#define AppName "Hearth"
#define AppId "io.hearth.Hearth"
#define SourceDir "..\..\dist\Hearth"

[Setup]
; A fixed AppId: upgrades replace the old version instead of installing beside it.
AppId={#AppId}
AppName={#AppName}
AppVersion={#AppVersion}
AppPublisher=Hearth contributors
DefaultDirName={autopf}\Hearth
DefaultGroupName=Hearth
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=Hearth-{#AppVersion}-windows-setup
SetupIconFile=..\..\resources\icons\hearth.ico
UninstallDisplayIcon={app}\Hearth.exe
; The bundled model barely compresses; lzma2 still shrinks Qt and Python by about half.
Compression=lzma2/normal
SolidCompression=yes
WizardStyle=modern
ChangesEnvironment=yes

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "addtopath"; Description: "Add the hearth command (hearth-cli.exe) to PATH"; GroupDescription: "Command line:"

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs
; A `hearth` command in a folder of its own, so PATH does not expose the bundle's DLLs to other programs.
Source: "hearth.cmd"; DestDir: "{app}\bin"; Flags: ignoreversion

[Icons]
Name: "{autoprograms}\Hearth"; Filename: "{app}\Hearth.exe"; AppUserModelID: "{#AppId}"
Name: "{autodesktop}\Hearth"; Filename: "{app}\Hearth.exe"; Tasks: desktopicon

[Registry]
; The per-user PATH; hearth-cli.exe is the console executable (Hearth.exe has no console to print to).
; Uninstalling leaves this PATH entry (a folder that no longer exists, harmless): Inno Setup can only
; delete the whole Path value, which would take the user's other entries with it.
Root: HKCU; Subkey: "Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}\bin"; \
    Tasks: addtopath; Check: NeedsAddPath(ExpandConstant('{app}\bin'))

[Run]
Filename: "{app}\Hearth.exe"; Description: "{cm:LaunchProgram,Hearth}"; Flags: nowait postinstall skipifsilent

; Uninstalling removes {app} only. Models, chats and settings live in %LOCALAPPDATA%\Hearth (platformdirs)
; and stay, as on Linux and macOS.

[Code]
function NeedsAddPath(Dir: string): Boolean;
var
  Path: string;
begin
  if not RegQueryStringValue(HKCU, 'Environment', 'Path', Path) then
  begin
    Result := True;
    exit;
  end;
  Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Path) + ';') = 0;
end;
