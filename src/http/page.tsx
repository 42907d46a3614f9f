/** @jsxImportSource hono/jsx */
/**
 * The frame of the service's own HTML pages (the front door, the API reference, the operators'
 * console): server-rendered with hono/jsx, nothing loaded from outside the app. Here, below routes/
 * and console/, so both can frame their pages with it.
 */
import type { Child } from "hono/jsx";
import { raw } from "hono/html";

/** A page's stylesheets and scripts: same-origin paths only. */
export interface PageAssets {
  styles?: readonly string[];
  scripts?: readonly string[];
}

export function Page(props: { title: string; children?: Child; head?: Child } & PageAssets) {
  return (
    <>
      {raw("<!doctype html>")}
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <meta name="viewport" content="width=device-width, initial-scale=1" />
          <title>{props.title}</title>
          {/* No icon to fetch: without one, browsers ask for /favicon.ico (a 404). */}
          <link rel="icon" href="data:," />
          {props.head}
          {(props.styles ?? []).map((href) => (
            <link rel="stylesheet" href={href} />
          ))}
        </head>
        <body>
          {props.children}
          {(props.scripts ?? []).map((src) => (
            <script src={src} />
          ))}
        </body>
      </html>
    </>
  );
}
