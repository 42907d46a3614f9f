/**
 * Test data created through the app's own write paths (operator routes) or plain SQL, with fresh
 * random names and auto-increment ids — never relying on seeded magic ids.
 */
import type { TestApp } from "./stack.ts";
import { call } from "./http.ts";

export const HANGZHOU = { x: 120.149993, y: 30.334229 } as const;

/** A point `metres` east of `from` (longitude offset at that latitude). */
export function east(from: { x: number; y: number }, metres: number): { x: number; y: number } {
  return { x: from.x + metres / (111_320 * Math.cos((from.y * Math.PI) / 180)), y: from.y };
}

export async function createShopType(t: TestApp): Promise<number> {
  const res = await t.deps.db.execute("INSERT INTO tb_shop_type (name, icon, sort) VALUES (?, '', 99)", [
    `type-${crypto.randomUUID().slice(0, 8)}`,
  ]);
  return Number(res.insertId);
}

export async function createShop(
  t: TestApp,
  typeId: number,
  at: { x: number; y: number } = HANGZHOU,
  name = `shop-${crypto.randomUUID().slice(0, 8)}`,
): Promise<number> {
  const res = await call<number>(t.app, "POST", "/api/shop", {
    token: `Bearer ${t.deps.config.ADMIN_TOKEN}`,
    json: { name, typeId, address: "test road 1", x: at.x, y: at.y, avgPrice: 80, images: "/imgs/a.jpg", area: "test" },
  });
  if (!res.body.success || typeof res.body.data !== "number")
    throw new Error(`create shop failed: ${JSON.stringify(res.body)}`);
  return res.body.data;
}

export const operator = (t: TestApp) => `Bearer ${t.deps.config.ADMIN_TOKEN}`;
