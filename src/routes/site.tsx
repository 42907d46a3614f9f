/**
 * The frame of the service's own HTML pages lives in http/page.tsx (the console frames its pages
 * with it too, and console/ sits below routes/); re-exported for the site's pages here.
 */
export { Page, type PageAssets } from "../http/page.tsx";
