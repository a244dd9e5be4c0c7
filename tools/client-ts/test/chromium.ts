// Debian's headless Chromium for the page tests (never a downloaded one), on a fresh profile.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { chromium, type BrowserContext, type Page } from "playwright-core";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** A browser and the profile directory it removes when closed. */
export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/**
 * Starts Chromium. `acceptNodeCertificates`: accept the nodes' certificates, which a development
 * CA signed for their node names (`7031.node.ferry`), while the test reaches them on loopback;
 * an operator imports that CA into their browser instead (docs/operations.md).
 */
export async function launch(options: { acceptNodeCertificates?: boolean; viewport?: { width: number; height: number } } = {}): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), "ferry-chromium-"));
  // A fresh profile: Playwright passes it to Chromium as --user-data-dir.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: options.viewport,
    ignoreHTTPSErrors: options.acceptNodeCertificates ?? false,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** The text of the page's element `id`. */
export const text = (page: Page, id: string) => page.locator(`#${id}`).innerText();

/** Waits until the page's `id` element's text, as `v`, passes the JavaScript condition `condition`. */
export async function until(page: Page, id: string, condition: string): Promise<string> {
  const field = `document.getElementById(${JSON.stringify(id)})?.textContent ?? ""`;
  await page.waitForFunction(`((v) => ${condition})(${field})`, null, { timeout: 30_000, polling: 50 });
  return text(page, id);
}

/**
 * Checks what a player on the play page saw through one move of its room from `from` to `to`:
 * the move listed once, the same session, no reconnect, nothing lost or out of order, and every
 * push shown once, numbered from the first on. Gives each push's message, in order.
 */
export async function playedThroughMove<T>(page: Page, from: string, to: string, session: string): Promise<T[]> {
  assert.equal(await page.locator("#moves li").count(), 1);
  assert.match(await page.locator("#moves li").innerText(), new RegExp(`${from} → ${to}`));
  assert.equal(await text(page, "session"), session);
  assert.equal(await text(page, "reconnects"), "0");
  assert.equal(await text(page, "lost"), "0");
  assert.equal(await text(page, "disorder"), "0");
  const pushes = (await page.locator("#pushes div").allInnerTexts()).map((line) => {
    const [, seq, json] = /^#(\d+) (.*)$/.exec(line) ?? [];
    return { seq: Number(seq), message: JSON.parse(json) as T };
  });
  assert.deepEqual(
    pushes.map((p) => p.seq),
    pushes.map((_, i) => i),
  );
  return pushes.map((p) => p.message);
}
