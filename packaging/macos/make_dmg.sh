#!/usr/bin/env bash
# Make dist/Hearth-<version>-macos-<arch>.dmg from dist/Hearth.app: a window with the app and a link to
# /Applications, so users drag it across. Only tools that ship with macOS (hdiutil, codesign, ditto).
#
# UNTESTED: written on Linux; no Mac has run it yet.
#
#   pip install -e ".[package]"
#   python packaging/build.py --no-archive          # -> dist/Hearth.app
#   bash packaging/macos/make_dmg.sh                 # -> dist/Hearth-<version>-macos-<arch>.dmg
#
# To distribute outside the App Store, sign and notarize (Gatekeeper refuses unsigned downloads):
#   SIGN_ID="Developer ID Application: Your Name (TEAMID)" NOTARY_PROFILE=hearth bash packaging/macos/make_dmg.sh
# with a keychain profile made once by `xcrun notarytool store-credentials hearth`.
set -euo pipefail
cd "$(dirname "$0")/../.."

APP=dist/Hearth.app
[ -d "$APP" ] || { echo "make_dmg.sh: $APP is missing; run python packaging/build.py first." >&2; exit 1; }
VERSION=$(python3 -c "import app; print(app.__version__)")
ARCH=$(uname -m)
DMG="dist/Hearth-${VERSION}-macos-${ARCH}.dmg"

if [ -n "${SIGN_ID:-}" ]; then
  # The hardened runtime is required for notarization; llama.cpp's Metal code needs no extra entitlement.
  codesign --force --deep --options runtime --timestamp --sign "$SIGN_ID" "$APP"
  codesign --verify --deep --strict "$APP"
fi

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
# ditto keeps the bundle's symlinks, extended attributes and signature intact (cp -R may not).
ditto "$APP" "$STAGE/Hearth.app"
ln -s /Applications "$STAGE/Applications"
rm -f "$DMG"
# UDZO: zlib-compressed, read-only, opens on every macOS Hearth supports.
hdiutil create -volname "Hearth ${VERSION}" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG"

if [ -n "${SIGN_ID:-}" ]; then
  codesign --force --timestamp --sign "$SIGN_ID" "$DMG"
  if [ -n "${NOTARY_PROFILE:-}" ]; then
    xcrun notarytool submit "$DMG" --keychain-profile "$NOTARY_PROFILE" --wait
    xcrun stapler staple "$DMG"
  fi
fi
echo "dmg: $DMG ($(du -h "$DMG" | cut -f1))"
# Check on a Mac: open the .dmg, drag Hearth to Applications, then
#   /Applications/Hearth.app/Contents/MacOS/Hearth --selftest
# Dragging Hearth.app to the Bin uninstalls it; models and chats stay in ~/Library/Application Support/Hearth.
