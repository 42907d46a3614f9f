/**
 * Demo images for the seed: placeholder pictures drawn as SVG here and rendered to PNG with
 * @resvg/resvg-js at seed time, then written to the app's blob store — the store `/imgs` serves
 * from (src/routes/upload.ts) — so every image URL the seed writes answers 200.
 *
 * Why blob-store names, not files of our own: the app serves `/imgs/blogs/{0-15}/{0-15}/{uuid}.{ext}`
 * and nothing else (upload names are the only image URLs it knows), and the same seed must work
 * against an S3/R2 store. Names are content-addressed (sha-256 of the SVG source, shaped as a
 * UUID), so a re-seed writes the same keys again instead of piling up copies, and the route's
 * `immutable` caching stays true. They get no tb_blog_upload row: no user owns them, so no user
 * can delete them.
 *
 * Shapes only, no text: resvg draws text only with fonts installed, and a fresh Debian box may
 * have none (let alone CJK ones); the pictures must look the same everywhere.
 */
import { Resvg } from "@resvg/resvg-js";
import { createHash } from "node:crypto";
import type { BlobStore } from "../../src/blob/index.ts";

export interface DemoImage {
  /** Public URL as the seed writes it into rows: `/imgs/blogs/…png`. */
  url: string;
  /** Blob-store key (`blogs/…png`). */
  key: string;
  svg: string;
}

/** Content-addressed blob key of an SVG source, in the shape the /imgs route accepts. */
function keyOf(svg: string): string {
  const h = createHash("sha256").update(svg).digest("hex");
  const b = Number.parseInt(h.slice(0, 2), 16);
  const uuid = `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
  return `blogs/${b & 0xf}/${(b >> 4) & 0xf}/${uuid}.png`;
}

function image(svg: string): DemoImage {
  const key = keyOf(svg);
  return { key, url: `/imgs/${key}`, svg };
}

const W = 400;
const H = 300;

/** Two gradient stops per shop type (index = type id − 1), in the order of SHOP_TYPES in seed.ts. */
const PALETTES: readonly [string, string][] = [
  ["#ff7e5f", "#feb47b"], // 美食
  ["#6a3093", "#a044ff"], // KTV
  ["#ee9ca7", "#ffdde1"], // 丽人·美发
  ["#11998e", "#38ef7d"], // 健身运动
  ["#b79891", "#94716b"], // 按摩·足疗
  ["#83a4d4", "#b6fbff"], // 美容SPA
  ["#f7971e", "#ffd200"], // 亲子游乐
  ["#141e30", "#243b55"], // 酒吧
  ["#fc466b", "#3f5efb"], // 轰趴馆
  ["#da4453", "#89216b"], // 美睫·美甲
];

/** One pictogram per shop type, drawn in a 100×100 box centred on (0,0), white. */
const PICTOGRAMS: readonly string[] = [
  // bowl with steam
  `<path d="M-42 0 H42 A42 36 0 0 1 -42 0 Z"/><rect x="-30" y="34" width="60" height="6" rx="3"/>
   <path d="M-18 -10 q-8 -12 0 -24 q8 -12 0 -24 M0 -10 q-8 -12 0 -24 q8 -12 0 -24 M18 -10 q-8 -12 0 -24 q8 -12 0 -24" fill="none" stroke="#fff" stroke-width="5" stroke-linecap="round"/>`,
  // microphone
  `<circle cx="0" cy="-22" r="24"/><rect x="-9" y="0" width="18" height="44" rx="6"/><rect x="-22" y="44" width="44" height="6" rx="3"/>`,
  // scissors
  `<circle cx="-22" cy="28" r="14" fill="none" stroke="#fff" stroke-width="7"/><circle cx="22" cy="28" r="14" fill="none" stroke="#fff" stroke-width="7"/>
   <path d="M-14 16 L26 -46 M14 16 L-26 -46" stroke="#fff" stroke-width="8" stroke-linecap="round"/>`,
  // dumbbell
  `<rect x="-44" y="-26" width="16" height="52" rx="4"/><rect x="28" y="-26" width="16" height="52" rx="4"/>
   <rect x="-54" y="-16" width="10" height="32" rx="3"/><rect x="44" y="-16" width="10" height="32" rx="3"/><rect x="-28" y="-6" width="56" height="12" rx="3"/>`,
  // footprint
  `<ellipse cx="0" cy="14" rx="22" ry="34"/><circle cx="-16" cy="-30" r="8"/><circle cx="-2" cy="-36" r="8"/><circle cx="12" cy="-32" r="7"/><circle cx="22" cy="-22" r="6"/>`,
  // leaf
  `<path d="M-40 40 C-40 -20 0 -44 44 -44 C44 0 20 40 -40 40 Z"/><path d="M-40 40 L20 -20" stroke-width="5" stroke="#00000030" fill="none"/>`,
  // balloon
  `<ellipse cx="0" cy="-14" rx="30" ry="36"/><path d="M-6 22 L6 22 L0 30 Z"/><path d="M0 30 q-10 12 0 24 q10 12 0 22" fill="none" stroke="#fff" stroke-width="3"/>`,
  // cocktail glass
  `<path d="M-40 -40 H40 L0 6 Z"/><rect x="-3" y="4" width="6" height="36"/><rect x="-22" y="38" width="44" height="6" rx="3"/><circle cx="26" cy="-46" r="9"/>`,
  // confetti and a party hat
  `<path d="M-30 44 L0 -44 L30 44 Z"/><circle cx="0" cy="-48" r="7"/><rect x="-52" y="-30" width="10" height="10" transform="rotate(30 -47 -25)"/>
   <rect x="40" y="-10" width="10" height="10" transform="rotate(-20 45 -5)"/><circle cx="-44" cy="20" r="5"/><circle cx="48" cy="30" r="5"/>`,
  // nail polish bottle
  `<rect x="-26" y="-4" width="52" height="48" rx="10"/><rect x="-10" y="-20" width="20" height="18"/><rect x="-7" y="-50" width="14" height="32" rx="4"/>`,
];

/** Variants per shop type: a shop carries all three (its detail page is a carousel). */
export const SHOP_IMAGE_VARIANTS = 3;

function shopSvg(typeIndex: number, variant: number): string {
  const [a, b] = PALETTES[typeIndex % PALETTES.length] as [string, string];
  const pict = PICTOGRAMS[typeIndex % PICTOGRAMS.length] ?? "";
  const angle = [
    [0, 0, 1, 1],
    [1, 0, 0, 1],
    [0, 1, 1, 0],
  ][variant % 3] as number[];
  const cx = [200, 140, 260][variant % 3];
  const scale = [1.3, 1.1, 1.2][variant % 3];
  // Soft "bokeh" circles, placed differently per variant so the three read as different photos.
  const dots = Array.from({ length: 6 }, (_, i) => {
    const x = (i * 83 + variant * 131 + typeIndex * 17) % W;
    const y = (i * 59 + variant * 71 + typeIndex * 29) % H;
    return `<circle cx="${x}" cy="${y}" r="${18 + ((i * 7 + variant * 5) % 30)}" fill="#fff" fill-opacity="0.12"/>`;
  }).join("");
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">` +
    `<defs><linearGradient id="g" x1="${angle[0]}" y1="${angle[1]}" x2="${angle[2]}" y2="${angle[3]}"><stop offset="0" stop-color="${a}"/><stop offset="1" stop-color="${b}"/></linearGradient></defs>` +
    `<rect width="${W}" height="${H}" fill="url(#g)"/>${dots}` +
    `<circle cx="${cx}" cy="150" r="${86 * (scale as number)}" fill="#fff" fill-opacity="0.18"/>` +
    `<g transform="translate(${cx} 150) scale(${scale})" fill="#fff">${pict}</g></svg>`
  );
}

const AVATAR_COLOURS = [
  "#f94144",
  "#f3722c",
  "#f8961e",
  "#f9c74f",
  "#90be6d",
  "#43aa8b",
  "#4d908e",
  "#577590",
  "#277da1",
  "#9b5de5",
  "#f15bb5",
  "#00bbf9",
];

function avatarSvg(i: number): string {
  const bg = AVATAR_COLOURS[i % AVATAR_COLOURS.length];
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="128" height="128" viewBox="0 0 128 128">` +
    `<rect width="128" height="128" fill="${bg}"/>` +
    `<circle cx="64" cy="50" r="24" fill="#fff" fill-opacity="0.9"/>` +
    `<path d="M20 128 C20 92 40 80 64 80 C88 80 108 92 108 128 Z" fill="#fff" fill-opacity="0.9"/></svg>`
  );
}

const SCENES: readonly [string, string, string][] = [
  ["#fddb92", "#d1fdff", "#5b8c5a"],
  ["#ff9a9e", "#fecfef", "#6d597a"],
  ["#a1c4fd", "#c2e9fb", "#3d5a80"],
  ["#f6d365", "#fda085", "#8d5b4c"],
  ["#84fab0", "#8fd3f4", "#2a9d8f"],
  ["#fbc2eb", "#a6c1ee", "#5e548e"],
];

/** A note photo: sky, sun, two rows of hills, each note its own light. */
function sceneSvg(i: number): string {
  const [top, bottom, hill] = SCENES[i % SCENES.length] as [string, string, string];
  const sunX = 80 + ((i * 97) % 240);
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">` +
    `<defs><linearGradient id="s" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="${top}"/><stop offset="1" stop-color="${bottom}"/></linearGradient></defs>` +
    `<rect width="${W}" height="${H}" fill="url(#s)"/><circle cx="${sunX}" cy="90" r="36" fill="#fff" fill-opacity="0.8"/>` +
    `<path d="M0 210 Q100 150 200 200 T400 190 V300 H0 Z" fill="${hill}" fill-opacity="0.6"/>` +
    `<path d="M0 250 Q120 200 240 245 T400 235 V300 H0 Z" fill="${hill}"/></svg>`
  );
}

export interface DemoImageSet {
  /** Per shop type (index = type id − 1): SHOP_IMAGE_VARIANTS images. */
  shops: DemoImage[][];
  /** User avatars. */
  avatars: DemoImage[];
  /** Note photos. */
  notes: DemoImage[];
}

/** The catalogue (names only: nothing is rendered until `storeDemoImages`). */
export function demoImages(shopTypes: number): DemoImageSet {
  return {
    shops: Array.from({ length: shopTypes }, (_, t) =>
      Array.from({ length: SHOP_IMAGE_VARIANTS }, (_, v) => image(shopSvg(t, v))),
    ),
    avatars: AVATAR_COLOURS.map((_, i) => image(avatarSvg(i))),
    notes: SCENES.map((_, i) => image(sceneSvg(i))),
  };
}

/** Renders every image of the set and writes it to `blobs`; returns how many were written. */
export async function storeDemoImages(blobs: BlobStore, set: DemoImageSet): Promise<number> {
  const all = [...set.shops.flat(), ...set.avatars, ...set.notes];
  for (const img of all) {
    const png = new Resvg(img.svg, { font: { loadSystemFonts: false } }).render().asPng();
    await blobs.put(img.key, new Uint8Array(png), { contentType: "image/png" });
  }
  return all.length;
}
